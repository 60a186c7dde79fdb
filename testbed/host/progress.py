"""Progress for long steps (builds, downloads, cluster start-up), drawn on stderr with rich."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console

console = Console(stderr=True, highlight=False)
LOG_EVERY = 10.0  # seconds between progress lines when stderr is not a terminal


class Step:
    """A running step: a spinner with a live one-line status, and a closing line with its duration."""

    def __init__(self, title: str, status) -> None:
        self.title = title
        self._status = status
        self.count = 0
        self.started = time.monotonic()
        self._printed = self.started

    def update(self, detail: str) -> None:
        elapsed = time.monotonic() - self.started
        self._status.update(f"{self.title}: {detail} [dim]({elapsed:.0f}s)[/dim]")
        # no spinner in a log (CI, pytest, a pipe): a plain line now and then shows the step is moving
        if not console.is_terminal and time.monotonic() - self._printed >= LOG_EVERY:
            self._printed = time.monotonic()
            console.print(f"  … {self.title}: {detail} ({elapsed:.0f}s)")

    def tick(self, line: str) -> None:
        """One more unit done (a compiled package, a downloaded file); `line` names it."""
        self.count += 1
        self.update(f"{self.count} done, last {line[-70:]}")


@contextmanager
def step(title: str) -> Iterator[Step]:
    """Show `title` with a spinner while the body runs; print how long it took when it ends."""
    with console.status(title) as status:
        current = Step(title, status)
        try:
            yield current
        except BaseException:
            console.print(f"[red]✗[/red] {title} failed after {time.monotonic() - current.started:.1f}s")
            raise
    console.print(f"[green]✓[/green] {title} ({time.monotonic() - current.started:.1f}s)")


def note(message: str) -> None:
    """A line of information on stderr."""
    console.print(message)
