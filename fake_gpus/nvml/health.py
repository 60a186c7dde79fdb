"""Inject GPU faults into a node's fake NVML, and read them back.

Faults are records appended to ``<state dir>/events`` (format in src/health.c and
docs/design/health.md): the library folds them into per-GPU health and delivers them to NVML event
sets in other processes. Appending under the state lock numbers the records; readers need no lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fake_gpus.nvml import state

EVENTS_MAGIC = "fake-nvml-events 1"
NO_INSTANCE = 0xFFFFFFFF  # nvmlEventData_t gpuInstanceId/computeInstanceId when not MIG-specific
KINDS = ("xid", "ecc-single", "ecc-double", "lost", "heal")


@dataclass(frozen=True)
class FaultRecord:
    seq: int
    gpu: int
    kind: str
    data: int = 0
    gi: int = NO_INSTANCE
    ci: int = NO_INSTANCE


@dataclass(frozen=True)
class GpuHealth:
    """What the library derives from the log for one GPU (ECC: corrected = single-bit)."""

    lost: bool = False
    corrected_volatile: int = 0
    uncorrected_volatile: int = 0
    corrected_aggregate: int = 0
    uncorrected_aggregate: int = 0


def _events_path(path: Path) -> Path:
    return Path(path) / "events"


def _parse(text: str) -> list[FaultRecord]:
    records = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 7 or parts[0] != "event" or parts[3] not in KINDS:
            continue  # the header, and anything the library would skip as well
        seq, gpu, _, data, gi, ci = (int(p) if i != 2 else p for i, p in enumerate(parts[1:]))
        records.append(FaultRecord(seq, gpu, parts[3], data, gi, ci))
    return records


def read_records(path: str | os.PathLike[str]) -> list[FaultRecord]:
    """Every fault record of the node, oldest first; [] when none was injected."""
    f = _events_path(Path(path))
    return _parse(f.read_text(errors="replace")) if f.is_file() else []


def health(path: str | os.PathLike[str]) -> dict[int, GpuHealth]:
    """Per-GPU health as the library computes it from the log (GPUs without records are absent)."""
    out: dict[int, GpuHealth] = {}
    for r in read_records(path):
        h = out.get(r.gpu, GpuHealth())
        if r.kind == "lost":
            h = GpuHealth(True, *_counters(h))
        elif r.kind == "heal":
            h = GpuHealth(False, 0, 0, h.corrected_aggregate, h.uncorrected_aggregate)
        elif r.kind in ("ecc-single", "ecc-double"):
            c = list(_counters(h))
            k = 1 if r.kind == "ecc-double" else 0
            c[k] += 1
            c[k + 2] += 1
            h = GpuHealth(h.lost, *c)
        out[r.gpu] = h
    return out


def _counters(h: GpuHealth) -> tuple[int, int, int, int]:
    return h.corrected_volatile, h.uncorrected_volatile, h.corrected_aggregate, h.uncorrected_aggregate


def append(path: str | os.PathLike[str], gpu: int, kind: str, data: int = 0,
           gi: int = NO_INSTANCE, ci: int = NO_INSTANCE) -> FaultRecord:
    """Append one fault record for GPU index `gpu`; returns it with its sequence number.

    Raises state.StateError (one line) for a directory that is not a state directory or a GPU index
    the node lacks; the caller checks the meaning (Xid range, lost GPU) before."""
    p = Path(path)
    if kind not in KINDS:
        raise state.StateError(f"fault kind {kind!r}; valid: {', '.join(KINDS)}")
    gpus, _ = state.validate_state_dir(p)
    if not 0 <= gpu < len(gpus):
        raise state.StateError(f"{p}: no GPU {gpu}; valid: 0 to {len(gpus) - 1}")
    with state.locked(p, exclusive=True):
        records = read_records(p)
        rec = FaultRecord((records[-1].seq if records else 0) + 1, gpu, kind, data, gi, ci)
        line = f"event {rec.seq} {rec.gpu} {rec.kind} {rec.data} {rec.gi} {rec.ci}\n"
        f = _events_path(p)
        fd = os.open(f, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size == 0:
                line = EVENTS_MAGIC + "\n" + line
            os.write(fd, line.encode())  # one write: a reader never sees half a record
        finally:
            os.close(fd)
    return rec
