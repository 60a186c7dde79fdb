"""What a replay measures: per event a sample of the fleet, per pod its wait and its devices.

A pod's GPU share stands for compute and memory alike (the trace has no GPU memory: its memory_mib is
host RAM), so on the GPUs in use (those with at least one allocated device):
- stranded compute = GPUs in use - the shares of the pods placed on them (in GPUs);
- stranded memory = the memory of the GPUs in use - each placed pod's share of its GPUs' memory (GiB).
Both count what a whole GPU or an oversized partition takes beyond a pod's share, and what is left free
on a GPU that is busy anyway.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field

_GPU = re.compile(r"^gpu-(\d+)")


def gpu_of(node: str, device: str) -> tuple[str, int]:
    """The physical GPU a device is (`gpu-3`) or lives on (`gpu-3-mig-1g10gb-0`)."""
    match = _GPU.match(device)
    if not match:
        raise ValueError(f"device {device!r} on {node} is not named gpu-<minor>[...]")
    return node, int(match.group(1))


@dataclass(frozen=True)
class Sample:
    """The fleet after one event."""

    event: int
    trace_time: int
    placed: int
    pending: int
    gpus_in_use: int
    stranded_compute: float  # GPUs
    stranded_memory_gib: float


@dataclass
class PodRecord:
    """One trace pod in one mode."""

    index: int
    name: str
    gpu_milli: int
    num_gpu: int
    seconds_to_schedule: float | None = None  # None: never placed
    devices: list[str] = field(default_factory=list)  # profile names ("3g.40gb") or "gpu"


def sample(event: int, trace_time: int, alive: dict[int, tuple[float, list[tuple[str, str]]]],
           memory_gib: dict[str, float]) -> Sample:
    """`alive`: pod index -> (share per GPU, allocated (node, device)); unplaced pods have no devices."""
    use: dict[tuple[str, int], float] = {}
    for share, devices in alive.values():
        for node, device in devices:
            gpu = gpu_of(node, device)
            use[gpu] = use.get(gpu, 0.0) + share
    placed = sum(1 for _, devices in alive.values() if devices)
    compute = sum(1 - min(1.0, u) for u in use.values())
    memory = sum(memory_gib[node] * (1 - min(1.0, u)) for (node, _), u in use.items())
    return Sample(event, trace_time, placed, len(alive) - placed, len(use), round(compute, 4), round(memory, 2))


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[Sample], pods: list[PodRecord]) -> dict:
    """The table row of one mode."""
    waits = [p.seconds_to_schedule for p in pods if p.seconds_to_schedule is not None]
    gpus = [s.gpus_in_use for s in samples]
    return {
        "pods": len(pods),
        "placed": len(waits),
        "never_placed": len(pods) - len(waits),
        "peak_gpus_in_use": max(gpus, default=0),
        "mean_gpus_in_use": round(statistics.fmean(gpus), 2) if gpus else 0,
        "peak_pending": max((s.pending for s in samples), default=0),
        "mean_stranded_compute": round(statistics.fmean(s.stranded_compute for s in samples), 2) if samples else 0,
        "mean_stranded_memory_gib": round(statistics.fmean(s.stranded_memory_gib for s in samples), 1) if samples else 0,
        "tts_p50": _percentile(waits, 0.5),
        "tts_p90": _percentile(waits, 0.9),
        "tts_max": max(waits, default=None),
    }


def as_dicts(items) -> list[dict]:
    return [asdict(i) for i in items]
