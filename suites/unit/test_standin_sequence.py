"""The calls the stand-in kubelet makes for a pod's life, against a recording plugin client: what the real
kubelet's DRA manager (pkg/kubelet/cm/dra/manager.go, 1.34) makes for the same pods. The same comparison
against a real kubelet on kind, recorded by the plugin, is suites/kind/test_kind_call_sequence.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from fake_gpus.driver.kubeletplugin.kubelet_client import ClaimId
from testbed.kubelet.daemon import KubeletDaemon, _PodState
from testbed.kubelet.standin import PrepareError, StandInKubelet, choose_service

NODE = "gpu-0"


@dataclass
class RecordingClient:
    """Stands for the plugin: records (method, claim names) and answers every claim, or fails prepares."""

    fail: bool = False
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def prepare(self, claims: list[ClaimId], version: str, timeout: float):
        self.calls.append(("prepare", tuple(c.name for c in claims)))
        error = "injected" if self.fail else ""
        return SimpleNamespace(claims={c.uid: SimpleNamespace(error=error, devices=[]) for c in claims})

    def unprepare(self, claims: list[ClaimId], version: str, timeout: float):
        self.calls.append(("unprepare", tuple(c.name for c in claims)))
        return SimpleNamespace(claims={c.uid: SimpleNamespace(error="") for c in claims})


def _pod(name: str, *claims: str) -> SimpleNamespace:
    return SimpleNamespace(metadata=SimpleNamespace(namespace="ns", name=name), claims=[ClaimId("ns", f"uid-{c}", c) for c in claims])


def _kubelet(tmp_path, monkeypatch, plugin: RecordingClient) -> StandInKubelet:
    kubelet = StandInKubelet(NODE, "gpu.example.com", tmp_path)
    kubelet._client = plugin  # registered: the plugin's sockets are not needed to see what is called
    monkeypatch.setattr(kubelet, "claims_of", lambda api, pod: pod.claims)
    return kubelet


def test_a_pod_with_two_claims_is_prepared_and_unprepared_in_one_call_each(tmp_path, monkeypatch) -> None:
    plugin = RecordingClient()
    kubelet = _kubelet(tmp_path, monkeypatch, plugin)
    kubelet.prepare_pod(None, _pod("p", "a", "b"))
    kubelet.unprepare_pod("ns/p")
    assert plugin.calls == [("prepare", ("a", "b")), ("unprepare", ("a", "b"))]


def test_a_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod(tmp_path, monkeypatch) -> None:
    plugin = RecordingClient()
    kubelet = _kubelet(tmp_path, monkeypatch, plugin)
    kubelet.prepare_pod(None, _pod("p1", "shared"))
    kubelet.prepare_pod(None, _pod("p2", "shared"))  # the kubelet finds it prepared: no call
    assert kubelet.unprepare_pod("ns/p1") == []
    kubelet.unprepare_pod("ns/p2")
    assert plugin.calls == [("prepare", ("shared",)), ("unprepare", ("shared",))]


def test_a_pod_joining_a_prepared_claim_has_only_its_new_claim_prepared(tmp_path, monkeypatch) -> None:
    plugin = RecordingClient()
    kubelet = _kubelet(tmp_path, monkeypatch, plugin)
    kubelet.prepare_pod(None, _pod("p1", "shared"))
    ids = kubelet.prepare_pod(None, _pod("p2", "shared", "own"))
    assert plugin.calls == [("prepare", ("shared",)), ("prepare", ("own",))]
    assert set(ids) == {"uid-shared", "uid-own"}  # the pod still gets the devices of both


def test_a_claim_whose_prepare_failed_is_unprepared_when_its_pod_goes(tmp_path, monkeypatch) -> None:
    """The kubelet holds the pod's reference from before the call, so a deleted pod's failed claim is unprepared
    (the plugin may have made part of it)."""
    plugin = RecordingClient(fail=True)
    kubelet = _kubelet(tmp_path, monkeypatch, plugin)
    daemon = KubeletDaemon(api=None, kubelets={NODE: kubelet}, registered={NODE}, pods={"ns/p": _PodState()})
    with pytest.raises(PrepareError):
        kubelet.prepare_pod(None, _pod("p", "a"))
    daemon.gone("ns/p")
    assert plugin.calls == [("prepare", ("a",)), ("unprepare", ("a",))]


def test_the_plugins_order_of_services_wins() -> None:
    assert choose_service(["v1beta1.DRAPlugin", "v1.DRAPlugin"]) == "v1beta1.DRAPlugin"
    assert choose_service(["v1alpha4.DRAPlugin", "v1.DRAPlugin"]) == "v1.DRAPlugin"
    assert choose_service(["v1alpha4.DRAPlugin"]) is None
