"""When killed components were down: each kill opens a span, the unit serving again closes it.

A campaign's waits (a pod that fits gets scheduled, a bound pod's claims get prepared, released devices
are cleaned up) count their bound in time the cluster was whole: `excused(t0, t1)` is how much of
[t0, t1] some killed component was still down or coming back, and a wait goes on for that much longer, and
then as long again for its clients' back-off (testbed.workloads.runner.allowed_wait).
Only kills open spans, so a component that stalls or dies on its own (a blocked scheduler) is not
excused, and a wait is never excused more than `cap` seconds (a unit that never comes back).
"""

from __future__ import annotations

import threading
import time


class Outages:
    """Spans [kill, serving again] of every killed unit, open ones running to now."""

    def __init__(self, cap: float = 420.0) -> None:
        self.cap = cap
        self._lock = threading.Lock()
        self._spans: list[list[float | None]] = []  # [start, end or None while down]
        self._open: dict[str, int] = {}  # unit -> index of its open span

    def down(self, unit: str, at: float | None = None) -> None:
        """`unit` was killed (a second kill before it is back keeps the span it has)."""
        with self._lock:
            if unit not in self._open:
                self._open[unit] = len(self._spans)
                self._spans.append([time.monotonic() if at is None else at, None])

    def up(self, unit: str, at: float | None = None) -> None:
        """`unit` serves again."""
        with self._lock:
            index = self._open.pop(unit, None)
            if index is not None:
                self._spans[index][1] = time.monotonic() if at is None else at

    def spans(self) -> list[tuple[float, float | None]]:
        with self._lock:
            return [(s, e) for s, e in self._spans]

    def excused(self, t0: float, t1: float) -> float:
        """Seconds of [t0, t1] during which at least one killed unit was down (their union), at most `cap`."""
        now = time.monotonic()
        pieces = sorted((max(s, t0), min(now if e is None else e, t1)) for s, e in self.spans())
        total, reach = 0.0, t0
        for start, end in pieces:
            start = max(start, reach)
            if end > start:
                total += end - start
                reach = end
        return min(total, self.cap)
