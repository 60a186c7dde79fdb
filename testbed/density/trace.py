"""A GPU pod trace in the columns of the Alibaba 2023 GPU trace (openb_pod_list_*.csv), as events.

Required columns: name, num_gpu, gpu_milli. Optional: creation_time and deletion_time (seconds; both or
neither), gpu_spec; any other column (cpu_milli, memory_mib, qos, pod_phase, scheduled_time) is read
past. Host CPU and memory are not requested on the bed: density here is about GPUs only.

- CPU-only pods (num_gpu 0) never touch DRA: they are counted and left out of the replay.
- gpu_spec names the trace cluster's GPU models a pod was restricted to (P100, T4, V100M16, ...); the bed
  has other boards, so it is recorded per pod and counted, never turned into a selector.
- A file without timestamps is replayed in file order with a fixed number of pods alive at once
  (`window`): pod i departs when pod i + window arrives, the last ones at the end.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from testbed.errors import BadInputError

REQUIRED = ("name", "num_gpu", "gpu_milli")
TIMES = ("creation_time", "deletion_time")
DEFAULT_WINDOW = 32


class TraceError(BadInputError):
    """A trace file that cannot be replayed; the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class TracePod:
    """One GPU pod of the trace."""

    index: int  # row number among the file's GPU pods, 0-based
    name: str
    num_gpu: int
    gpu_milli: int  # share of one GPU, 1..1000
    gpu_spec: str = ""
    created: int | None = None
    deleted: int | None = None

    @property
    def demand(self) -> float:
        """GPUs of compute the pod asks for (0.46 for 460 milli, 4 for four whole GPUs)."""
        return self.num_gpu * self.gpu_milli / 1000


@dataclass(frozen=True)
class Event:
    """An arrival or a departure of one pod at a trace time."""

    time: int
    kind: str  # "arrive" | "depart"
    pod: TracePod


@dataclass(frozen=True)
class Trace:
    """The GPU pods of a file and what was left out."""

    path: Path
    pods: tuple[TracePod, ...]
    cpu_only: int
    with_gpu_spec: int
    timed: bool

    def events(self, window: int = DEFAULT_WINDOW) -> list[Event]:
        """Arrivals and departures in trace order; at equal times departures first (they free devices)."""
        if self.timed:
            events = [Event(p.created, "arrive", p) for p in self.pods]
            events += [Event(p.deleted, "depart", p) for p in self.pods if p.deleted is not None]
            return sorted(events, key=lambda e: (e.time, e.kind == "arrive", e.pod.index))
        events = []
        for i, pod in enumerate(self.pods):
            if i >= window:
                events.append(Event(i, "depart", self.pods[i - window]))
            events.append(Event(i, "arrive", pod))
        end = len(self.pods)
        events += [Event(end, "depart", p) for p in self.pods[max(0, end - window):]]
        return events


def _int(row: dict, column: str, where: str) -> int:
    text = (row.get(column) or "").strip()
    try:
        return int(text)
    except ValueError:
        raise TraceError(f"{where}: {column} {text!r} is not a whole number") from None


def load_trace(path: str | Path, limit: int | None = None) -> Trace:
    """Read a trace file; `limit` keeps its first GPU pods only (a slice for quick runs)."""
    file = Path(path)
    try:
        handle = file.open(newline="")
    except OSError as exc:
        raise TraceError(f"cannot read trace {file}: {exc.strerror}") from exc
    with handle:
        reader = csv.DictReader(handle)
        columns = tuple(reader.fieldnames or ())
        missing = [c for c in REQUIRED if c not in columns]
        if missing:
            raise TraceError(f"trace {file}: missing column {missing[0]!r}; needs {', '.join(REQUIRED)} "
                             f"(optional: {', '.join(TIMES)}, gpu_spec), as in openb_pod_list_default.csv")
        timed = all(c in columns for c in TIMES)
        if not timed and any(c in columns for c in TIMES):
            raise TraceError(f"trace {file}: has one of {', '.join(TIMES)} but not the other; give both or neither")
        pods: list[TracePod] = []
        cpu_only = with_spec = 0
        for line, row in enumerate(reader, start=2):
            where = f"trace {file} line {line}"
            num_gpu, milli = _int(row, "num_gpu", where), _int(row, "gpu_milli", where)
            if num_gpu == 0:
                cpu_only += 1
                continue
            if num_gpu < 0 or not 0 < milli <= 1000 or (num_gpu > 1 and milli != 1000):
                raise TraceError(f"{where}: num_gpu {num_gpu} with gpu_milli {milli}; valid: num_gpu 0, or 1 with "
                                 f"gpu_milli 1..1000, or more than 1 with gpu_milli 1000")
            spec = (row.get("gpu_spec") or "").strip()
            with_spec += bool(spec)
            created = _int(row, "creation_time", where) if timed else None
            deleted = _int(row, "deletion_time", where) if timed and (row.get("deletion_time") or "").strip() else None
            if created is not None and deleted is not None and deleted < created:
                raise TraceError(f"{where}: deletion_time {deleted} is before creation_time {created}")
            pods.append(TracePod(len(pods), (row.get("name") or f"row-{line}").strip(), num_gpu, milli, spec, created, deleted))
            if limit is not None and len(pods) >= limit:
                break
    if not pods:
        raise TraceError(f"trace {file}: no GPU pods (every row has num_gpu 0)")
    return Trace(file, tuple(pods), cpu_only, with_spec, timed)
