"""The stand-in kubelet (KWOK beds) calls our kubelet plugin as the real kubelet does on kind.

The same pod lifecycles (suites/kind/call_sequence.py: one claim from a template, two claims, a claim shared
by two pods, an init container, a force delete, a device-plugin style `nvidia.com/gpu` pod) run on the kind
bed's dynamic-MIG H100 worker, whose kubelet is real, and on a KWOK bed with the same node behind the
stand-in; our plugin logs every call it serves on both ($FAKE_GPUS_PLUGIN_CALL_LOG), and the two recordings,
normalised, must be equal but for the differences in ALLOWED, each the real kubelet's own.
"""

from __future__ import annotations

import uuid

import pytest

from fake_gpus.driver.kubeletplugin.calllog import CALL_LOG_ENV
from suites.kind.call_sequence import IDENTITY, SCENARIOS, Allowed, Recording, Runner, compare
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import from_flags
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import wait_for_all

pytestmark = [pytest.mark.kind, pytest.mark.slow]

LOG = "calls.jsonl"  # inside each node's plugin directory
NODE = "gpu-mig"  # the kind bed's dynamic-MIG H100 worker; the KWOK bed's one node, the same hardware
KWOK_IMAGE = "registry.invalid/never-pulled:0"  # KWOK runs no containers

# Differences that are the real kubelet's own, each a named Allowed with a one-line reason; anything else
# fails. Kubernetes 1.34.4's kubelet and the stand-in made the same calls in every scenario: none so far.
ALLOWED: tuple[Allowed, ...] = ()
ALLOWED_REGISTRATION: tuple[Allowed, ...] = ()


def _record(runner_bed, node: str, image: str, read_log) -> Recording:
    """Run every scenario in a fresh namespace of `runner_bed`; returns once that namespace's pods are gone
    again, also after a failure (a pod left holding a MIG device would fail the kind suite's next tests)."""
    namespace = f"seq-{uuid.uuid4().hex[:8]}"
    create_namespace(runner_bed.core, namespace)
    try:
        return Runner(runner_bed, namespace, node, image, read_log).run()
    finally:
        runner_bed.core.delete_namespace(namespace, grace_period_seconds=0)
        wait_for_all(runner_bed.core.list_namespaced_pod, lambda pods: not pods, namespace=namespace, timeout=180,
                     what=f"the pods of namespace {namespace} gone")


@pytest.fixture(scope="module")
def kind_recording(kind_bed) -> Recording:
    """The scenarios on kind, with the call log switched on by redeploying the driver (and off again after)."""
    from testbed.campaign.kind import read_if_present
    from testbed.host.docker.dockerd import docker

    worker = kind_bed.worker(NODE)
    path = f"/var/lib/kubelet/plugins/{IDENTITY.driver}/{LOG}"
    running = DriverSpec.from_dict((kind_bed.cluster.saved_spec() or {}).get("driver") or {})
    docker("exec", worker, "rm", "-f", path)  # a kept cluster's earlier log
    try:
        kind_bed.cluster.deploy_driver(running.with_env({CALL_LOG_ENV: LOG}))
        return _record(kind_bed, worker, kind_bed.workload_image, lambda: read_if_present(worker, path))
    finally:
        kind_bed.cluster.deploy_driver(running)
        docker("exec", worker, "rm", "-f", path, check=False)


@pytest.fixture(scope="module")
def kwok_recording(bed) -> Recording:
    """The scenarios on a KWOK bed of the same node, its plugin started by the stand-in with the call log on."""
    from testbed.drivers.ours.kwok import plugin_dir

    layout = from_flags([f"{NODE}=h100-80gb:1:dynamic-mig"])
    with bed(layout, DriverSpec(env={CALL_LOG_ENV: LOG}), backend="kwok", label="seq") as kwok:
        log = plugin_dir(kwok.cluster.home, NODE) / LOG
        return _record(kwok, NODE, KWOK_IMAGE, lambda: log.read_text() if log.exists() else "")


def _show(kubelet: list, standin: list) -> None:
    """Both sequences in the test's output (`-rP` shows it for a pass too)."""
    print("kubelet: ", *kubelet, sep="\n  ")
    print("stand-in:", *standin, sep="\n  ")


def test_registration_is_the_kubelets(kind_recording, kwok_recording) -> None:
    kubelet, standin = kind_recording.registration, kwok_recording.registration
    _show(kubelet, standin)
    assert ("NotifyRegistrationStatus", True) in kubelet, kubelet  # the log was on while the kubelet registered
    diff = compare(kubelet, standin, ALLOWED_REGISTRATION)
    assert not diff, "\n".join(diff)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_stand_in_calls_the_plugin_as_the_kubelet_does(scenario, kind_recording, kwok_recording) -> None:
    kubelet, standin = kind_recording.scenarios[scenario], kwok_recording.scenarios[scenario]
    _show(kubelet, standin)
    assert any(c[1] == "NodePrepareResources" for c in kubelet), f"the kubelet prepared nothing in {scenario}: {kubelet}"
    diff = compare(kubelet, standin, ALLOWED)
    assert not diff, "\n".join(diff)
