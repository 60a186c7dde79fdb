"""How suites/kind/test_kind_call_sequence.py normalises a plugin's call log: calls go to the step during
which they were made, claims become the pod's names for them, other namespaces and timestamps drop out."""

from __future__ import annotations

from fake_gpus.driver.kubeletplugin.calllog import Call
from suites.kind.call_sequence import SCENARIOS, Allowed, Runner, compare


def _runner() -> Runner:
    runner = Runner(api=None, namespace="ns", node="n", image="i", read_log=lambda: "")
    runner.labels = {"solo-gpu-x1": "solo/gpu", "shared": "shared"}
    runner.marks = [(10.0, "one-claim", "create solo"), (20.0, "one-claim", "delete solo"), (30.0, "shared-claim", "create first")]
    return runner


def test_calls_are_attributed_to_their_step_and_named_as_the_pod_names_them() -> None:
    calls = [Call("GetInfo", "registration", t=5.0), Call("NotifyRegistrationStatus", "registration", t=5.1, registered=True),
             Call("NodePrepareResources", "v1", (("ns", "solo-gpu-x1", "u1"),), t=11.0),
             Call("NodePrepareResources", "v1", (("other", "solo-gpu-x1", "u9"),), t=12.0),  # another test's namespace
             Call("NodeUnprepareResources", "v1", (("ns", "solo-gpu-x1", "u1"),), t=21.0),
             Call("NodePrepareResources", "v1", (("ns", "shared", "u2"),), t=31.0)]
    recording = _runner().recording(calls)
    assert recording.registration == [("GetInfo", None), ("NotifyRegistrationStatus", True)]
    assert recording.scenarios["one-claim"] == [("create solo", "NodePrepareResources", "v1", ("solo/gpu",)),
                                               ("delete solo", "NodeUnprepareResources", "v1", ("solo/gpu",))]
    assert recording.scenarios["shared-claim"] == [("create first", "NodePrepareResources", "v1", ("shared",))]
    assert set(recording.scenarios) == set(SCENARIOS)


def test_a_call_in_another_step_differs() -> None:
    early = _runner().recording([Call("NodeUnprepareResources", "v1", (("ns", "solo-gpu-x1", "u1"),), t=19.0)])
    late = _runner().recording([Call("NodeUnprepareResources", "v1", (("ns", "solo-gpu-x1", "u1"),), t=21.0)])
    assert compare(late.scenarios["one-claim"], early.scenarios["one-claim"])


def test_only_allowed_differences_pass() -> None:
    kubelet = [("create a", "NodePrepareResources", "v1", ("a/gpu",)), ("restart", "NodePrepareResources", "v1", ("a/gpu",))]
    standin = kubelet[:1]
    assert compare(kubelet, standin)
    again = Allowed("prepare-again", "a test of the mechanism", lambda c: c == kubelet[1])
    assert compare(kubelet, standin, (again,)) == []
