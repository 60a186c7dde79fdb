"""`go test -json` events (what `go tool test2json` writes) read into one result per test and subtest."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class TestResult:
    """One test or subtest (`Parent/Child`): its verdict, seconds and output lines."""

    __test__ = False  # not a pytest class, whatever its name

    name: str
    verdict: str = ""  # pass | fail | skip; "" when the binary ended before the test did
    elapsed: float = 0.0
    output: list[str] = field(default_factory=list)

    @property
    def parent(self) -> str | None:
        return self.name.rpartition("/")[0] or None


def parse_events(lines: Iterable[str]) -> tuple[list[TestResult], list[str]]:
    """The tests in the order they started, and the output lines outside any test (the package's own:
    its PASS/FAIL line, a panic). Lines that are not JSON events are kept as package output."""
    tests: dict[str, TestResult] = {}
    package: list[str] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            package.append(line)
            continue
        if not isinstance(event, dict):
            package.append(line)
            continue
        name, action = event.get("Test"), event.get("Action")
        if not name:
            if action == "output":
                package.append(event.get("Output", "").rstrip("\n"))
            continue
        test = tests.setdefault(name, TestResult(name))
        if action == "output":
            test.output.append(event.get("Output", "").rstrip("\n"))
        elif action in (PASS, FAIL, SKIP):
            test.verdict = action
            test.elapsed = float(event.get("Elapsed") or 0.0)
    return list(tests.values()), package
