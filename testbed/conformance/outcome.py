"""What one check run yields: a verdict, a one-line reason, its duration and the evidence files it wrote."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, FAIL, NOT_RUN, ERROR = "pass", "fail", "not-run", "error"


class CheckFailed(AssertionError):
    """The driver broke the requirement; the message says what was seen against what was required."""


class NotRun(Exception):
    """The check cannot run on this subject (backend, capability or nothing to check); the message says why."""


@dataclass
class Evidence:
    """Files a check leaves in the report directory, named relative to it."""

    root: Path
    check_id: str
    files: list[str] = field(default_factory=list)

    def write(self, name: str, data) -> Path:
        """Write `data` as JSON (or text when a str) under evidence/<check>/<name>; returns the path."""
        path = self.root / "evidence" / self.check_id / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
        self.files.append(str(path.relative_to(self.root)))
        return path


@dataclass
class Outcome:
    """The result of one check."""

    id: str
    level: str
    verdict: str
    message: str
    duration: float
    evidence: list[str]
    requirement: str = ""

    def as_dict(self) -> dict:
        return asdict(self)
