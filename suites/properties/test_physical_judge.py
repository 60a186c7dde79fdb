"""The physical judge (testbed/workloads/physical.py) on hand-made node states, and the fake NVML's answer to
a create without placement (the `nvml-chooses-placement` fault's call): no cluster."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from fake_gpus.driver.kubeletplugin import gpuconfig
from fake_gpus.driver.nvml_adapter import Nvml, NvmlLibrary
from fake_gpus.nvml.build import SONAME, ensure_library
from fake_gpus.nvml.state import create_state_dir
from testbed.workloads.devices import DeviceId
from testbed.workloads.oracle import Result
from testbed.workloads.physical import (KNOWN_LEAKS, HeldClaim, Instance, MpsDaemon, NodeNvml, judge_node, known_leaks, mebibytes,
                                        off_layout, sharing_settings)
from testbed.workloads.physical_watch import read_nvml

DRIVER = "gpu.nvidia.com"
SIZES = {19: 1, 9: 4}  # H100: 1g.10gb, 3g.40gb


def _claim(*devices: str, prepared: bool = True, failed: bool = False, config: list[dict] | None = None) -> HeldClaim:
    return HeldClaim("ns/c", [Result("r0", DeviceId(DRIVER, "n", d)) for d in devices], config or [], prepared, failed)


def _nvml(*instances: Instance, bare: tuple[Instance, ...] = (), settings: tuple[int, int] = (0, 0)) -> NodeNvml:
    return NodeNvml(frozenset(instances), frozenset(bare), {0: settings})


def _sharing(strategy: str, interval: str | None = None) -> list[dict]:
    sharing: dict = {"strategy": strategy}
    if interval:
        sharing["timeSlicingConfig"] = {"interval": interval}
    return [{"source": "FromClaim", "requests": ["r0"], "opaque": {"driver": DRIVER, "parameters": {"apiVersion": gpuconfig.GROUP_VERSION, "kind": "GpuConfig", "sharing": sharing}}}]


def test_a_prepared_partition_at_its_allocated_placement_passes() -> None:
    assert judge_node("n", "dynamic-mig", _nvml(Instance(0, 19, 0, 1)), [_claim("gpu-0-mig-1g10gb-19-0")], SIZES, DRIVER) == []


def test_a_partition_nvml_placed_elsewhere_is_caught() -> None:
    problems = judge_node("n", "dynamic-mig", _nvml(Instance(0, 19, 6, 1)), [_claim("gpu-0-mig-1g10gb-19-0")], SIZES, DRIVER)
    assert len(problems) == 1 and "missing: gpu 0 profile 19 at 0+1" in problems[0].message
    assert "not prepared for any claim: gpu 0 profile 19 at 6+1" in problems[0].message


def test_an_instance_of_a_released_claim_and_a_half_made_one_are_caught() -> None:
    released = judge_node("n", "dynamic-mig", _nvml(Instance(0, 9, 4, 4)), [_claim("gpu-0-mig-3g40gb-9-4", prepared=False)], SIZES, DRIVER)
    assert released and released[0].property == "physical"
    half = judge_node("n", "dynamic-mig", _nvml(bare=(Instance(0, 9, 4, 4),)), [], SIZES, DRIVER)
    assert half and "without a compute instance" in half[0].message


def test_a_refused_claim_is_neither_required_nor_forbidden() -> None:
    refused = _claim("gpu-0-mig-1g10gb-19-0", prepared=False, failed=True)
    assert judge_node("n", "dynamic-mig", _nvml(), [refused], SIZES, DRIVER) == []
    assert judge_node("n", "dynamic-mig", _nvml(bare=(Instance(0, 19, 0, 1),)), [refused], SIZES, DRIVER) == []


def test_whole_and_static_nodes() -> None:
    assert judge_node("n", "whole", _nvml(Instance(0, 19, 0, 1)), [_claim("gpu-0")], SIZES, DRIVER)
    layout = frozenset({Instance(0, 9, 0, 4), Instance(0, 9, 4, 4)})
    assert judge_node("n", "static-mig", _nvml(*layout), [_claim("gpu-0-mig-3g40gb-9-4")], SIZES, DRIVER, layout) == []
    changed = judge_node("n", "static-mig", _nvml(Instance(0, 9, 0, 4)), [_claim("gpu-0-mig-3g40gb-9-4")], SIZES, DRIVER, layout)
    assert len(changed) == 2  # the prepared device is gone, and the layout changed


def test_a_static_node_holds_its_layouts_instances() -> None:
    """Against the layout itself, not only a baseline: a node still holding its old mode's instances (a switch
    not applied yet, or never) fails."""
    layout = {9: 2}  # all-3g.40gb
    held = _nvml(Instance(0, 9, 0, 4), Instance(0, 9, 4, 4))
    assert off_layout(held, layout) == {} and judge_node("n", "static-mig", held, [], SIZES, DRIVER, layout=layout) == []
    stale = _nvml(Instance(0, 19, 0, 1))
    assert off_layout(stale, layout) == {0: {19: 1}}
    assert judge_node("n", "static-mig", stale, [], SIZES, DRIVER, layout=layout)
    assert off_layout(_nvml(), layout) == {0: {}}


def test_sharing_settings_follow_the_prepared_gpuconfig() -> None:
    sliced = _claim("gpu-0", config=_sharing("TimeSlicing", "Long"))
    assert judge_node("n", "whole", _nvml(settings=(0, 3)), [sliced], SIZES, DRIVER) == []
    assert judge_node("n", "whole", _nvml(settings=(0, 0)), [sliced], SIZES, DRIVER)
    mps = _claim("gpu-0", config=_sharing("MPS"))
    assert judge_node("n", "whole", _nvml(settings=(3, 0)), [mps], SIZES, DRIVER) == []
    assert judge_node("n", "whole", _nvml(settings=(3, 0)), [_claim("gpu-0")], SIZES, DRIVER)  # left behind
    assert judge_node("n", "whole", _nvml(settings=(3, 0)), [_claim("gpu-0", prepared=False, failed=True, config=_sharing("MPS"))],
                      SIZES, DRIVER) == []


def test_a_config_reaches_the_request_it_names_exactly_as_nvidias_prepare_does() -> None:
    """NVIDIA's known bug, judged as the reference behaves: a GpuConfig naming the main request `r0` misses the
    devices of its firstAvailable subrequest `r0/s2` (the API says it reaches them); our plugin agrees; the last
    config that reaches a request wins, even one without sharing."""
    parent = _sharing("MPS")
    sub = HeldClaim("ns/c", [Result("r0/s2", DeviceId(DRIVER, "n", "gpu-0"))], parent, True)
    assert sharing_settings(parent, "r0/s2", DRIVER) is None
    assert judge_node("n", "whole", _nvml(settings=(0, 0)), [sub], SIZES, DRIVER) == []
    assert judge_node("n", "whole", _nvml(settings=(3, 0)), [sub], SIZES, DRIVER)  # MPS there is more than NVIDIA does
    allocation = {"devices": {"config": parent}}
    assert gpuconfig.config_for(gpuconfig.opaque_configs(allocation, DRIVER), "gpu-0", gpuconfig.GPU, "r0/s2") is None
    assert gpuconfig.config_for(gpuconfig.opaque_configs(allocation, DRIVER), "gpu-0", gpuconfig.GPU, "r0") is not None
    plain = [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"apiVersion": gpuconfig.GROUP_VERSION, "kind": "GpuConfig"}}}]
    assert sharing_settings(_sharing("TimeSlicing", "Long") + plain, "r0", DRIVER) is None
    assert sharing_settings(plain + _sharing("TimeSlicing", "Long"), "r0", DRIVER) == (0, 3)


def test_nvidias_known_full_gpu_leak_is_excused_only_for_nvidia_and_only_that_shape() -> None:
    """A 7g prepare of NVIDIA's plugin fails and leaves a GPU instance over the whole GPU without a compute
    instance (dra-driver-nvidia-gpu#1480): excused on NVIDIA's bed, a violation on ours; a smaller half-made
    instance is never excused."""
    sizes = {**SIZES, 0: 8}  # H100 7g.80gb: 8 memory slices
    leak, small = Instance(0, 0, 0, 8), Instance(0, 9, 4, 4)
    observed = _nvml(bare=(leak, small))
    assert known_leaks(observed, sizes, KNOWN_LEAKS["nvidia"]) == {leak}
    assert known_leaks(observed, sizes, KNOWN_LEAKS.get("ours", ())) == frozenset()
    assert len(judge_node("n", "dynamic-mig", _nvml(bare=(leak,)), [], sizes, DRIVER)) == 1
    assert judge_node("n", "dynamic-mig", _nvml(bare=(leak,)), [], sizes, DRIVER, excused=frozenset({leak})) == []
    assert judge_node("n", "dynamic-mig", observed, [], sizes, DRIVER, excused=frozenset({leak}))  # the small one


def test_nvml_without_a_placement_picks_its_own_and_read_nvml_sees_it() -> None:
    """What the fault relies on: the fake's nvmlDeviceCreateGpuInstance places a 1g.10gb elsewhere than slice 0."""
    state = Path(tempfile.mkdtemp(prefix="physical-judge-"))
    try:
        create_state_dir(state, [("h100-80gb", 1)])
        library = NvmlLibrary(ensure_library() / SONAME)
        for nvml_places, start in ((False, 0), (True, 6)):
            with library.session(state):
                nvml = Nvml(nvml_places=nvml_places)
                handle = nvml.gpu_by_minor(0)
                made = nvml.create_instance(handle, nvml.profile_for_token(handle, "1g10gb"), 0, 1)
            assert made.start == start
            seen = read_nvml(state)
            assert (seen.instances, seen.bare, seen.settings, seen.mps) == (frozenset({Instance(0, 19, start, 1)}), frozenset(), {0: (0, 0)}, {})
            with library.session(state):
                assert Nvml().destroy_instance(made)
    finally:
        shutil.rmtree(state)


def _mps(mps_config: dict | None = None) -> list[dict]:
    config = _sharing("MPS")
    if mps_config is not None:
        config[0]["opaque"]["parameters"]["sharing"]["mpsConfig"] = mps_config
    return config


def _mps_nvml(*daemons: MpsDaemon, settings: tuple[int, int] = (3, 0)) -> NodeNvml:
    return NodeNvml(frozenset(), frozenset(), {0: settings}, {0: "GPU-a"}, {0: daemons} if daemons else {})


ASKED = {"defaultActiveThreadPercentage": 40, "defaultPinnedDeviceMemoryLimit": "2Gi", "defaultPerDevicePinnedMemoryLimit": {"0": "1Gi"}}


def test_an_mps_claim_wants_one_daemon_with_its_limits() -> None:
    claim = _claim("gpu-0", config=_mps(ASKED))
    assert judge_node("n", "whole", _mps_nvml(MpsDaemon(40, 1024, 7)), [claim], SIZES, DRIVER) == []
    ignored = judge_node("n", "whole", _mps_nvml(MpsDaemon(None, None, 7)), [claim], SIZES, DRIVER)  # mps-limits-ignored
    assert len(ignored) == 1 and "its prepared claim asks for one holding (40, 1024)" in ignored[0].message, ignored
    missing = judge_node("n", "whole", _mps_nvml(), [claim], SIZES, DRIVER)
    assert len(missing) == 1 and "holding (thread %, pinned MiB) []" in missing[0].message, missing
    two = judge_node("n", "whole", _mps_nvml(MpsDaemon(40, 1024, 7), MpsDaemon(40, 1024, 8)), [claim], SIZES, DRIVER)
    assert len(two) == 1, two


def test_a_daemon_without_an_mps_claim_is_caught_and_a_refused_claim_excuses_it() -> None:
    left = judge_node("n", "whole", _mps_nvml(MpsDaemon(None, None, 7), settings=(0, 0)), [], SIZES, DRIVER)  # mps-daemon-left-behind
    assert len(left) == 1 and "no prepared claim asks MPS of it" in left[0].message, left
    released = _claim("gpu-0", prepared=False, config=_mps())
    assert judge_node("n", "whole", _mps_nvml(MpsDaemon(None, None, 7), settings=(0, 0)), [released], SIZES, DRIVER) == left
    refused = _claim("gpu-0", prepared=False, failed=True, config=_mps())
    assert judge_node("n", "whole", _mps_nvml(MpsDaemon(None, None, 7), settings=(0, 0)), [refused], SIZES, DRIVER) == []
    unread = NodeNvml(frozenset(), frozenset(), {0: (0, 0)}, {0: "GPU-a"}, None)  # a driver in MPS_NOT_RUN
    assert judge_node("n", "whole", unread, [_claim("gpu-0", config=_mps(ASKED))], SIZES, DRIVER)[0].message.count("compute mode") == 2


def test_mebibytes_rounds_down_as_the_plugin_does() -> None:
    assert [mebibytes(q) for q in ("1Gi", "1G", "1500Mi", "10", "bad")] == [1024, 953, 1500, 0, None]
