"""slices.stable-restart's comparison: device order is no churn; a new generation, a rename or new content is."""

from __future__ import annotations

import copy

from testbed.kube.slice_diff import fingerprint, restart_changes


def _slice(name: str, devices: list[str], generation: int = 1, rv: str = "10", memory: str = "40Gi") -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": generation, "resourceSliceCount": 1},
                     "devices": [{"name": d, "capacity": {"memory": {"value": memory}}} for d in devices]}}


# NVIDIA's static-MIG slice before and after a restart (conformance report, second session)
BEFORE = [_slice("n1-gpu.nvidia.com-abc", ["gpu-0-mig-3g.40gb-9-4", "gpu-0-mig-2g.20gb-14-0", "gpu-0-mig-1g.10gb-19-2"])]


def test_nothing_changed_is_no_churn() -> None:
    assert restart_changes(fingerprint(BEFORE), fingerprint(copy.deepcopy(BEFORE))) == ([], [])


def test_a_reordered_rewrite_is_recorded_not_failed() -> None:
    after = [_slice("n1-gpu.nvidia.com-abc", ["gpu-0-mig-2g.20gb-14-0", "gpu-0-mig-1g.10gb-19-2", "gpu-0-mig-3g.40gb-9-4"], rv="11")]
    churn, notes = restart_changes(fingerprint(BEFORE), fingerprint(after))
    assert churn == []
    assert len(notes) == 1 and "reordered" in notes[0]


def test_a_new_generation_is_churn_even_in_another_order() -> None:
    after = [_slice("n1-gpu.nvidia.com-abc", ["gpu-0-mig-2g.20gb-14-0", "gpu-0-mig-1g.10gb-19-2", "gpu-0-mig-3g.40gb-9-4"], generation=2, rv="11")]
    churn, _ = restart_changes(fingerprint(BEFORE), fingerprint(after))
    assert churn == ["slice n1-gpu.nvidia.com-abc: pool generation 1 -> 2"]


def test_a_renamed_device_is_churn() -> None:
    after = [_slice("n1-gpu.nvidia.com-abc", ["gpu-0-mig-2g.20gb-14-0", "gpu-0-mig-1g.10gb-19-2", "gpu-0-mig-3g.40gb-9-5"], rv="11")]
    churn, _ = restart_changes(fingerprint(BEFORE), fingerprint(after))
    assert len(churn) == 1 and "device gpu-0-mig-3g.40gb-9-4 gone" in churn[0] and "gpu-0-mig-3g.40gb-9-5 new" in churn[0]


def test_changed_content_is_churn() -> None:
    after = [_slice("n1-gpu.nvidia.com-abc", ["gpu-0-mig-3g.40gb-9-4", "gpu-0-mig-2g.20gb-14-0", "gpu-0-mig-1g.10gb-19-2"], rv="11", memory="39Gi")]
    churn, _ = restart_changes(fingerprint(BEFORE), fingerprint(after))
    assert len(churn) == 1 and "content changed" in churn[0]


def test_a_renamed_slice_is_churn() -> None:
    after = [_slice("n1-gpu.nvidia.com-xyz", ["gpu-0-mig-3g.40gb-9-4", "gpu-0-mig-2g.20gb-14-0", "gpu-0-mig-1g.10gb-19-2"])]
    churn, _ = restart_changes(fingerprint(BEFORE), fingerprint(after))
    assert sorted(churn) == ["slice n1-gpu.nvidia.com-abc vanished", "slice n1-gpu.nvidia.com-xyz appeared"]
