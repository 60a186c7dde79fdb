"""GPU failures beside the component kills: from a seeded schedule, a random GPU of the bed gets a fatal Xid or is
lost (a record in its node's fake-NVML event log, fake_gpus.nvml.health, as `dra-testbed gpu fail` appends it),
and is healed a random while later. At most one GPU is down at a time, and every failure is healed by the end
(`__exit__`), so the run's final audit sees the bed whole: what it judges is that failing GPUs next to kills leave
no prepared claim behind and no device held twice.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fake_gpus.nvml import health, state

FAILURES = (("xid", 79), ("lost", 0))  # fatal Xid 79 (fallen off the bus) and a lost GPU


@dataclass(frozen=True)
class GpuEvent:
    at: float  # seconds since the failures started
    action: str  # "xid-79", "lost" or "heal"
    node: str
    gpu: int


@dataclass
class GpuFailures:
    """Fail and heal GPUs of `state_dirs` (node -> its fake NVML state directory) `limit` times, `interval` seconds
    apart (drawn), each failure lasting `down` seconds (drawn)."""

    state_dirs: dict[str, Path]
    seed: int
    limit: int
    interval: tuple[float, float] = (6.0, 15.0)
    down: tuple[float, float] = (3.0, 10.0)
    events: list[GpuEvent] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-failures", daemon=True)
        self._start = time.monotonic()
        self._down: tuple[str, int] | None = None
        gpus = {node: len(state.validate_state_dir(d)[0]) for node, d in sorted(state_dirs_items(self.state_dirs))}
        self._gpus = [(node, g) for node, count in gpus.items() for g in range(count)]

    def __enter__(self) -> GpuFailures:
        if min(self.limit, len(self._gpus)) > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started: a finished thread joins at once
            self._thread.join(timeout=60)
        self._heal()  # the final audit sees every GPU back

    def counts(self) -> dict[str, int]:
        """Events per action, for the campaign report."""
        by = Counter(e.action for e in self.events)
        failures = {k: v for k, v in sorted(by.items()) if k != "heal"}
        return {"failed": sum(failures.values()), "healed": by.get("heal", 0), **failures}

    def _record(self, action: str, node: str, gpu: int) -> None:
        self.events.append(GpuEvent(round(time.monotonic() - self._start, 1), action, node, gpu))

    def _heal(self) -> None:
        if self._down is not None:
            node, gpu = self._down
            health.append(self.state_dirs[node], gpu, "heal")
            self._record("heal", node, gpu)
            self._down = None

    def _loop(self) -> None:
        try:
            failed = 0
            while failed < self.limit and not self._stop.wait(self._rng.uniform(*self.interval)):
                node, gpu = self._rng.choice(self._gpus)
                kind, data = self._rng.choice(FAILURES)
                health.append(self.state_dirs[node], gpu, kind, data)
                self._down = (node, gpu)
                self._record(f"{kind}-{data}" if kind == "xid" else kind, node, gpu)
                failed += 1
                if self._stop.wait(self._rng.uniform(*self.down)):
                    return
                self._heal()
        except Exception as exc:  # noqa: BLE001 - said: a thread dying unheard reads as a run with fewer failures
            self.errors.append(f"the GPU failures stopped after {len(self.events)} events: {type(exc).__name__}: {exc}"[:300])


def state_dirs_items(dirs: dict[str, Path]) -> list[tuple[str, Path]]:
    """The nodes whose state directory exists (a node of the layout without GPUs has none)."""
    return [(node, d) for node, d in dirs.items() if (Path(d) / "gpus").is_file()]
