"""The killer: SIGKILL a random supervised component at random moments, from a seeded schedule.

Each round waits a random interval, waits until every unit serves again (kills do not pile onto a
restart still under way), calls `observe` (the observed moment just before the kill), then kills a
unit of the next component from a shuffled deck of `kinds` (every component once per round, in a
random order, so a dozen kills hit each at least twice). The schedule depends only on the seed.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

from testbed.campaign.supervisor import Supervision

COMPONENTS = ("plugin", "publisher", "scheduler", "apiserver", "etcd")
# seconds a killed unit gets to serve again: a kubelet's crash-loop back-off grows to 5 min (kind), an apiserver
# at load 100 has taken a minute to answer /readyz (KWOK)
BACK_TIMEOUT = 420.0


@dataclass(frozen=True)
class Kill:
    at: float  # seconds since the chaos started
    kind: str
    unit: str


@dataclass
class Chaos:
    supervisor: Supervision
    seed: int
    limit: int
    interval: tuple[float, float] = (4.0, 10.0)
    kinds: Sequence[str] = COMPONENTS
    observe: Callable[[], list[str]] | None = None  # what it found double: kept here, per run
    kills: list[Kill] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)  # double allocations the observations before kills found
    unrecovered: list[str] = field(default_factory=list)  # a unit that did not serve again (a finding): no further kills

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._deck: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos", daemon=True)
        self._start = time.monotonic()

    def __enter__(self) -> Chaos:
        if self.limit > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    @property
    def done(self) -> bool:
        return len(self.kills) >= self.limit

    @property
    def over(self) -> bool:
        """No further kill will come: the limit is reached, or the chaos stopped early (said in `unrecovered`
        or `errors`)."""
        return self.done or (self._thread.ident is not None and not self._thread.is_alive())

    def by_kind(self) -> dict[str, int]:
        counts = Counter(k.kind for k in self.kills)
        return {kind: counts.get(kind, 0) for kind in self.kinds}

    def _wait_back(self) -> bool:
        """Every unit serves again (False after BACK_TIMEOUT, or at once when the chaos is stopped)."""
        deadline = time.monotonic() + BACK_TIMEOUT
        while not self.supervisor.all_running():
            if time.monotonic() > deadline or self._stop.wait(self.supervisor.period):
                return False
        return True

    def _loop(self) -> None:
        try:
            self._kill_until_done()
        except Exception as exc:  # noqa: BLE001 - said: a thread dying unheard reads as a run that had fewer kills
            self.errors.append(f"the chaos stopped after {len(self.kills)} kills: {type(exc).__name__}: {exc}"[:300])

    def _kill_until_done(self) -> None:
        while not self.done and not self._stop.wait(self._rng.uniform(*self.interval)):
            if not self._wait_back():
                if not self._stop.is_set():
                    self.unrecovered.append(f"a unit did not serve again within {BACK_TIMEOUT:.0f} s; no further kills")
                return
            if self.observe is not None:
                try:
                    self.observed += self.observe()
                except Exception as exc:  # noqa: BLE001 - an observation that cannot be made is noted, not fatal
                    self.errors.append(f"observation failed: {type(exc).__name__}: {exc}"[:300])
            if not self._deck:  # every component once per round of len(kinds) kills, in a random order
                self._deck = list(self.kinds)
                self._rng.shuffle(self._deck)
            kind = self._deck.pop()
            units = sorted(self.supervisor.of_kind(kind), key=lambda u: u.name)
            if not units:
                continue
            unit = self._rng.choice(units)
            if self._stop.is_set():
                return
            if self.supervisor.kill(unit.name).killed_at is None:
                self._deck.append(kind)  # nothing ran to kill (a plugin its stand-in kubelet starts on demand): next time
                continue
            self.kills.append(Kill(round(time.monotonic() - self._start, 1), kind, unit.name))
