"""Xid errors the fake can inject, with their documented meaning and where it is documented.

An Xid is the number the NVIDIA kernel driver logs (and NVML reports as `eventData` of an
`nvmlEventTypeXidCriticalError` event) for a GPU error. Meanings paraphrase NVIDIA's Xid catalog;
`ignored_by_nvidia_driver` marks the application Xids that NVIDIA's DRA driver
(cmd/gpu-kubelet-plugin/device_health.go, `xidsToSkip`) publishes no NoSchedule taint for.

`recovery` is what NVML's `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` field answers for the GPU after the Xid
until the GPU is reset: the catalog's "Resolution Bucket (Immediate Action)" column mapped onto
nvml.h's `nvmlDeviceGpuRecoveryAction_t` (RESTART_APP and IGNORE need nothing of the GPU: NONE; RESET_GPU:
GPU_RESET; RESTART_BM, restart the machine: NODE_REBOOT). The real driver announces the change as Xid 154
("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"). The fake library gets this
table through fake_gpus/nvml/build.py, as it gets board facts.
"""

from __future__ import annotations

from dataclasses import dataclass

XID_CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
NVML_HEADER_SOURCE = "nvml.h of github.com/NVIDIA/go-nvml v0.13.4-1, nvmlEventData_st.eventData"
# nvml.h: eventData "is set as 999 for unknown Xid error", so no Xid NVML reports is above 999.
MAX_XID = 999

# nvmlDeviceGpuRecoveryAction_t values (nvml.h of go-nvml v0.13.4-1); the fake uses these three.
RECOVERY_NONE = 0  # NVML_GPU_RECOVERY_ACTION_NONE
RECOVERY_GPU_RESET = 1  # NVML_GPU_RECOVERY_ACTION_GPU_RESET
RECOVERY_NODE_REBOOT = 2  # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
# An Xid this catalog does not name: NVIDIA's driver taints it NoSchedule (not in its skip list), so the
# fake treats it as the common case of a fatal Xid, a pending GPU reset.
RECOVERY_UNLISTED = RECOVERY_GPU_RESET


@dataclass(frozen=True)
class Xid:
    number: int
    meaning: str
    ignored_by_nvidia_driver: bool = False
    recovery: int = RECOVERY_NONE  # NVML_GPU_RECOVERY_ACTION_* pending after it, until a reset
    source: str = XID_CATALOG_URL


XIDS: dict[int, Xid] = {x.number: x for x in (
    Xid(13, "graphics engine exception (an application fault, e.g. an out-of-range access)", True),
    Xid(31, "GPU memory page fault (an application accessed memory it does not map)", True),
    Xid(43, "GPU stopped processing (an application's channel was reset after a fault)", True),
    Xid(45, "preemptive cleanup after earlier errors (an application's contexts torn down)", True),
    Xid(48, "double-bit (uncorrectable) ECC error in GPU memory", recovery=RECOVERY_GPU_RESET),
    # a remapped row takes effect at the next reset, so the GPU waits for one
    Xid(63, "ECC page retirement or row remapping recorded", recovery=RECOVERY_GPU_RESET),
    Xid(64, "ECC page retirement or row remapping could not be recorded", recovery=RECOVERY_GPU_RESET),
    Xid(68, "video processor (NVDEC) exception", True),
    Xid(74, "NVLink error", recovery=RECOVERY_GPU_RESET),
    # the GPU is gone from PCIe: a GPU reset cannot reach it, the machine is restarted
    Xid(79, "GPU has fallen off the bus", recovery=RECOVERY_NODE_REBOOT),
    Xid(92, "high single-bit ECC error rate"),  # corrected errors: nothing to do at once
    Xid(94, "contained ECC error (only the affected applications are hit)"),  # those applications restart
    Xid(95, "uncontained ECC error (every application on the GPU is affected)", recovery=RECOVERY_GPU_RESET),
    Xid(109, "context switch timeout", True),
    Xid(119, "GSP RPC timeout (the GPU System Processor did not answer)", recovery=RECOVERY_GPU_RESET),
    Xid(120, "GSP error", recovery=RECOVERY_GPU_RESET),
)}


def ignored_by_nvidia_driver() -> frozenset[int]:
    """The Xids NVIDIA's DRA driver ignores by default (taint effect None rather than NoSchedule)."""
    return frozenset(x.number for x in XIDS.values() if x.ignored_by_nvidia_driver)


def describe(number: int) -> str:
    """One line for an Xid: its documented meaning, or that the catalog here does not name it."""
    x = XIDS.get(number)
    return f"Xid {number}: {x.meaning}" if x else f"Xid {number}: not in this catalog (see {XID_CATALOG_URL})"


def recovery_action(number: int) -> int:
    """NVML's recovery action (NVML_GPU_RECOVERY_ACTION_*) pending on a GPU after Xid `number`."""
    x = XIDS.get(number)
    return x.recovery if x else RECOVERY_UNLISTED
