"""Per-node state directories of the fake NVML: create, validate, read and reset them.

Layout (the C library parses the same format, see src/core.c):
  gpus  "fake-nvml-gpus 1", then "gpu <index> <board-key> <minor> <GPU-uuid> <serial> <bus-id>"
  mig   "fake-nvml-mig 1", then "mode <gpu> <cur> <pending>", "gi <gpu> <id> <profile-id> <start> <size>",
        "ci <gpu> <gi-id> <ci-id> <profile-id> <start> <size> <MIG-uuid>"
  mps   "fake-nvml-mps 1", then "daemon <gpu> <pid> <thread-percentage|-> <pinned-MiB|-> <multi-user 0|1> <pipe-dir>":
        MPS control daemons (one line per GPU a daemon serves), written by the stand-in nvidia-cuda-mps-control
        (mps_control.py) while it runs; a missing file means none.
  lock  flock()ed by every reader (shared) and writer (exclusive); files are replaced by rename.
  proc/driver/...  the instances' nvidia-caps capability files, rewritten with mig (capabilities.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from fake_gpus.nvml import capabilities

GPUS_MAGIC = "fake-nvml-gpus"
MIG_MAGIC = "fake-nvml-mig"
FORMAT_VERSION = 1
MAX_GPUS = 64
# where a node keeps its fake GPUs; the library uses it when FAKE_NVML_STATE_DIR is unset (core.c FK_NODE_STATE_DIR)
NODE_STATE_DIR = "/var/lib/dra-testbed/nvml"

_UUID_RE = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU_LINE = re.compile(rf"gpu (\d+) (\S+) (\d+) (GPU-{_UUID_RE}) (\S{{1,31}}) ([0-9A-Fa-f]{{8}}:[0-9A-Fa-f]{{2}}:[0-9A-Fa-f]{{2}}\.[0-9A-Fa-f])")
_MODE_LINE = re.compile(r"mode (\d+) ([01]) ([01])")
_GI_LINE = re.compile(r"gi (\d+) (\d+) (\d+) (\d+) (\d+)")
_CI_LINE = re.compile(rf"ci (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (MIG-{_UUID_RE})")
MPS_MAGIC = "fake-nvml-mps"
_MPS_LINE = re.compile(r"daemon (\d+) (\d+) (\d+|-) (\d+|-) ([01]) (/\S*)")


class StateError(ValueError):
    """A state directory is missing, foreign or corrupt; str() is one line naming the file."""


@dataclass(frozen=True)
class GpuRecord:
    index: int
    board: str
    minor: int
    uuid: str
    serial: str
    bus_id: str


@dataclass(frozen=True)
class GpuInstanceRecord:
    gpu: int
    id: int
    profile_id: int
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstanceRecord:
    gpu: int
    gi: int
    id: int
    profile_id: int
    start: int
    size: int
    uuid: str


@dataclass(frozen=True)
class MpsDaemonRecord:
    """One GPU an MPS control daemon serves, with the defaults its clients get (None: never set, the daemon's own:
    100 % of the threads, no pinned-memory limit)."""

    gpu: int
    pid: int
    active_thread_percentage: int | None
    pinned_mib: int | None
    multi_user: bool
    pipe_dir: str


@dataclass
class MigState:
    modes: dict[int, tuple[int, int]] = field(default_factory=dict)
    gpu_instances: list[GpuInstanceRecord] = field(default_factory=list)
    compute_instances: list[ComputeInstanceRecord] = field(default_factory=list)


def board_keys() -> tuple[str, ...]:
    """Keys of the catalog boards the library is built with."""
    from fake_gpus.nvml.build import catalog_boards

    return tuple(b.key for b in catalog_boards())


def parse_gpu_spec(text: str) -> tuple[str, int]:
    """"h100-80gb:8" -> ("h100-80gb", 8); raises StateError naming the valid boards."""
    keys = board_keys()
    board, sep, count = text.partition(":")
    if not sep or not count.strip().isdigit():
        raise StateError(f"--gpus {text!r}: expected BOARD:COUNT, e.g. {keys[0]}:8")
    if board not in keys:
        raise StateError(f"--gpus {text!r}: unknown board {board!r}; valid boards: {', '.join(keys)}")
    n = int(count)
    if not 1 <= n <= MAX_GPUS:
        raise StateError(f"--gpus {text!r}: count {count.strip()[:20]}; valid: 1 to {MAX_GPUS} GPUs per node")
    return board, n


def _gpu_records(path: Path, boards: Sequence[tuple[str, int]]) -> list[GpuRecord]:
    """Stable identities derived from the directory's absolute path, so a node keeps its UUIDs."""
    total = sum(count for _, count in boards)
    if total > MAX_GPUS:  # before the loop below, which a count of 10**20 would never finish
        raise StateError(f"{path}: {total} GPUs asked for; valid: 1 to {MAX_GPUS} GPUs per node")
    records = []
    for board, count in boards:
        for _ in range(count):
            i = len(records)
            seed = f"{path.resolve()}|{i}|{board}"
            digest = hashlib.sha256(seed.encode()).hexdigest()
            records.append(GpuRecord(
                index=i,
                board=board,
                minor=i,
                uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, 'fake-nvml:' + seed)}",
                serial=str(1650000000000 + int(digest[:12], 16) % 10**10),
                bus_id=f"00000000:{0x18 + 3 * i:02X}:00.0",
            ))
    if len(records) > MAX_GPUS:
        raise StateError(f"{path}: {len(records)} GPUs asked for; valid: 1 to {MAX_GPUS} GPUs per node")
    return records


def _format_gpus(records: Sequence[GpuRecord]) -> str:
    lines = [f"{GPUS_MAGIC} {FORMAT_VERSION}"]
    lines += [f"gpu {r.index} {r.board} {r.minor} {r.uuid} {r.serial} {r.bus_id}" for r in records]
    return "\n".join(lines) + "\n"


def format_mig(n_gpus: int, mig: MigState) -> str:
    lines = [f"{MIG_MAGIC} {FORMAT_VERSION}"]
    for g in range(n_gpus):
        cur, pend = mig.modes.get(g, (0, 0))
        lines.append(f"mode {g} {cur} {pend}")
        lines += [f"gi {g} {r.id} {r.profile_id} {r.start} {r.size}" for r in mig.gpu_instances if r.gpu == g]
        lines += [f"ci {g} {r.gi} {r.id} {r.profile_id} {r.start} {r.size} {r.uuid}" for r in mig.compute_instances if r.gpu == g]
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextmanager
def locked(path: Path, exclusive: bool) -> Iterator[None]:
    """Hold the state directory's flock (the same lock the C library takes)."""
    with open(Path(path) / "lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _matches(f: Path, lines: Sequence[str], pattern: re.Pattern[str], want: str) -> Iterator[tuple[int, re.Match[str]]]:
    """(line number, match) of each line of a state file after its magic line, blanks and comments left out;
    StateError naming the line when one does not match `pattern` (`want` says what it should be)."""
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip() or line.startswith("#"):
            continue
        m = pattern.fullmatch(line.strip())
        if not m:
            raise StateError(f"{f}:{n}: malformed line {line!r} (want: {want})")
        yield n, m


def _read_gpus(path: Path) -> list[GpuRecord]:
    keys = board_keys()
    f = path / "gpus"
    if not f.is_file():
        raise StateError(f"{f}: missing: {path} is not a fake-nvml state directory; valid: a directory `fake-nvml env --state-dir` made")
    lines = f.read_text(errors="replace").splitlines()
    if not lines or lines[0].split()[:1] != [GPUS_MAGIC]:
        raise StateError(f"{f}: not a fake-nvml state file (first line must be '{GPUS_MAGIC} {FORMAT_VERSION}')")
    if lines[0].strip() != f"{GPUS_MAGIC} {FORMAT_VERSION}":
        raise StateError(f"{f}: format {lines[0].strip()!r} not supported (want '{GPUS_MAGIC} {FORMAT_VERSION}')")
    records = []
    for n, m in _matches(f, lines, _GPU_LINE, "gpu INDEX BOARD MINOR GPU-UUID SERIAL BUSID"):
        index, board = int(m[1]), m[2]
        if index != len(records):
            raise StateError(f"{f}:{n}: GPU index {index} out of order (want {len(records)})")
        if board not in keys:
            raise StateError(f"{f}:{n}: unknown board {board!r}; valid boards: {', '.join(keys)}")
        records.append(GpuRecord(index, board, int(m[3]), m[4], m[5], m[6]))
    if not records:
        raise StateError(f"{f}: lists no GPU")
    if len(records) > MAX_GPUS:
        raise StateError(f"{f}: more than {MAX_GPUS} GPUs")
    return records


def _read_mig(path: Path, gpus: Sequence[GpuRecord]) -> MigState:
    from fake_gpus.catalog import get_board

    f = path / "mig"
    if not f.is_file():
        raise StateError(f"{f}: missing")
    lines = f.read_text(errors="replace").splitlines()
    if not lines or lines[0].strip() != f"{MIG_MAGIC} {FORMAT_VERSION}":
        raise StateError(f"{f}: not a fake-nvml MIG state file (first line must be '{MIG_MAGIC} {FORMAT_VERSION}')")
    mig = MigState()
    for n, line in enumerate(lines[1:], start=2):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{f}:{n}"
        if m := _MODE_LINE.fullmatch(line):
            g = int(m[1])
            if g >= len(gpus):
                raise StateError(f"{where}: mode line for GPU {g}, but the node has {len(gpus)}")
            mig.modes[g] = (int(m[2]), int(m[3]))
        elif m := _GI_LINE.fullmatch(line):
            rec = GpuInstanceRecord(*map(int, m.groups()))
            if rec.gpu >= len(gpus):
                raise StateError(f"{where}: GPU instance on GPU {rec.gpu}, but the node has {len(gpus)}")
            board = get_board(gpus[rec.gpu].board)
            if rec.profile_id not in {p.id for p in board.gpu_instance_profiles}:
                raise StateError(f"{where}: profile id {rec.profile_id} is not a MIG profile of {board.key}")
            if any(r.gpu == rec.gpu and r.id == rec.id for r in mig.gpu_instances):
                raise StateError(f"{where}: duplicate GPU instance id {rec.id} on GPU {rec.gpu}")
            mig.gpu_instances.append(rec)
        elif m := _CI_LINE.fullmatch(line):
            rec = ComputeInstanceRecord(*map(int, m.groups()[:6]), m[7])
            if not any(r.gpu == rec.gpu and r.id == rec.gi for r in mig.gpu_instances):
                raise StateError(f"{where}: compute instance of GPU instance {rec.gi}, which does not exist")
            if any(r.gpu == rec.gpu and r.gi == rec.gi and r.id == rec.id for r in mig.compute_instances):
                raise StateError(f"{where}: duplicate compute instance id {rec.id}")
            mig.compute_instances.append(rec)
        else:
            raise StateError(f"{where}: malformed line {line!r}")
    return mig


def validate_state_dir(path: str | os.PathLike[str]) -> tuple[list[GpuRecord], MigState]:
    """Read and check a state directory; raises StateError (one line, naming the file) if it is bad."""
    p = Path(path)
    if not p.is_dir():
        raise StateError(f"{p}: state directory does not exist")
    if not (p / "lock").is_file():
        raise StateError(f"{p / 'lock'}: missing: {p} is not a fake-nvml state directory; valid: a directory `fake-nvml env --state-dir` made")
    with locked(p, exclusive=False):
        gpus = _read_gpus(p)
        return gpus, _read_mig(p, gpus)


def create_state_dir(path: str | os.PathLike[str], boards: Sequence[tuple[str, int]]) -> list[GpuRecord]:
    """Create a node's state directory with these (board, count) GPUs, MIG off.

    An existing state directory with the same GPU list is kept as it is (its MIG state too); one
    with other GPUs, or a non-empty directory that is not a state directory, raises StateError."""
    keys = board_keys()
    for board, count in boards:
        if board not in keys:
            raise StateError(f"unknown board {board!r}; valid boards: {', '.join(keys)}")
        if count < 1:
            raise StateError(f"board {board}: count must be at least 1")
    if not boards:
        raise StateError("no GPUs asked for: give at least one BOARD:COUNT")
    p = Path(path)
    wanted = _gpu_records(p, boards)
    if p.exists() and any(p.iterdir()):
        if not (p / "lock").is_file():  # someone's files: never written into
            raise StateError(f"{p}: holds files but is not a fake-nvml state directory; valid: a new or empty directory, "
                             f"or one `fake-nvml env --state-dir` made before")
        gpus, _ = validate_state_dir(p)
        if [(g.board, g.uuid) for g in gpus] != [(g.board, g.uuid) for g in wanted]:
            have = ", ".join(sorted({f"{g.board}:{sum(x.board == g.board for x in gpus)}" for g in gpus}))
            raise StateError(f"{p / 'gpus'}: already holds other GPUs ({have}); reset or pick another directory")
        return gpus
    p.mkdir(parents=True, exist_ok=True)
    (p / "lock").touch()
    with locked(p, exclusive=True):
        _write_atomic(p / "mig", format_mig(len(wanted), MigState()))
        _write_atomic(p / "gpus", _format_gpus(wanted))
        capabilities.write_tree(p, wanted, MigState())
    return wanted


def reset_state_dir(path: str | os.PathLike[str]) -> None:
    """Destroy every GPU and compute instance and turn MIG off on every GPU of the node."""
    p = Path(path)
    gpus, _ = validate_state_dir(p)
    with locked(p, exclusive=True):
        _write_atomic(p / "mig", format_mig(len(gpus), MigState()))
        capabilities.write_tree(p, gpus, MigState())


def write_mig_state(path: str | os.PathLike[str], mig: MigState) -> None:
    """Replace the MIG state of a node (used by tests and tools to set up a layout)."""
    p = Path(path)
    gpus, _ = validate_state_dir(p)
    with locked(p, exclusive=True):
        _write_atomic(p / "mig", format_mig(len(gpus), mig))
        capabilities.write_tree(p, gpus, mig)


def refresh_capabilities(path: str | os.PathLike[str]) -> None:
    """Rewrite the capability files of a state directory from its MIG state."""
    p = Path(path)
    validate_state_dir(p)
    with locked(p, exclusive=True):
        gpus = _read_gpus(p)
        capabilities.write_tree(p, gpus, _read_mig(p, gpus))


def _format_mps(daemons: Sequence[MpsDaemonRecord]) -> str:
    dash = lambda v: "-" if v is None else str(v)  # noqa: E731
    lines = [f"{MPS_MAGIC} {FORMAT_VERSION}"]
    lines += [f"daemon {d.gpu} {d.pid} {dash(d.active_thread_percentage)} {dash(d.pinned_mib)} {int(d.multi_user)} {d.pipe_dir}"
              for d in sorted(daemons, key=lambda d: (d.gpu, d.pid))]
    return "\n".join(lines) + "\n"


def _read_mps(path: Path, n_gpus: int) -> list[MpsDaemonRecord]:
    f = path / "mps"
    if not f.is_file():
        return []
    lines = f.read_text(errors="replace").splitlines()
    if not lines or lines[0].strip() != f"{MPS_MAGIC} {FORMAT_VERSION}":
        raise StateError(f"{f}: not a fake-nvml MPS state file (first line must be '{MPS_MAGIC} {FORMAT_VERSION}')")
    out = []
    for n, m in _matches(f, lines, _MPS_LINE, "daemon GPU PID THREAD%|- PINNED-MIB|- MULTIUSER PIPE-DIR"):
        gpu = int(m[1])
        if gpu >= n_gpus:
            raise StateError(f"{f}:{n}: MPS daemon on GPU {gpu}, but the node has {n_gpus}")
        opt = lambda v: None if v == "-" else int(v)  # noqa: E731
        out.append(MpsDaemonRecord(gpu, int(m[2]), opt(m[3]), opt(m[4]), m[5] == "1", m[6]))
    return out


def read_mps_daemons(path: str | os.PathLike[str]) -> list[MpsDaemonRecord]:
    """The MPS control daemons a node's state lists (one record per GPU each serves); StateError if corrupt."""
    p = Path(path)
    validate_state_dir(p)
    with locked(p, exclusive=False):
        return _read_mps(p, len(_read_gpus(p)))


def update_mps_daemons(path: str | os.PathLike[str], pid: int, records: Sequence[MpsDaemonRecord]) -> None:
    """Replace the records of daemon `pid` by `records` (none: the daemon is gone), under the state lock."""
    p = Path(path)
    validate_state_dir(p)
    with locked(p, exclusive=True):
        kept = [d for d in _read_mps(p, len(_read_gpus(p))) if d.pid != pid]
        _write_atomic(p / "mps", _format_mps(kept + list(records)))
