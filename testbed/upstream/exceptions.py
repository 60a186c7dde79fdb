"""Expected failures of the upstream suite on our beds, as data (exceptions.yaml) with a reason each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.errors import BadInputError

DEFAULT_FILE = Path(__file__).with_name("exceptions.yaml")


@dataclass(frozen=True)
class Exception_:
    """One expected failure: specs matching `test` on the given backends and minors (empty: all)."""

    test: re.Pattern
    reason: str
    backends: tuple[str, ...] = ()
    minors: tuple[str, ...] = ()

    def applies(self, name: str, backend: str, minor: str) -> bool:
        return ((not self.backends or backend in self.backends) and (not self.minors or minor in self.minors)
                and bool(self.test.search(name)))


def load(path: Path = DEFAULT_FILE) -> list[Exception_]:
    """The entries of `path`; BadInputError naming the bad entry and the valid shape otherwise."""
    shape = "valid: a mapping with `test` (regex) and `reason`, optional `backends` and `minors` lists"
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get("exceptions") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise BadInputError(f"{path}: expected a top-level `exceptions:` list")
    found = []
    for index, entry in enumerate(entries):
        if not (isinstance(entry, dict) and isinstance(entry.get("test"), str) and isinstance(entry.get("reason"), str)
                and entry["reason"].strip() and set(entry) <= {"test", "reason", "backends", "minors"}):
            raise BadInputError(f"{path}: exception #{index + 1} is malformed; {shape}")
        try:
            pattern = re.compile(entry["test"])
        except re.error as exc:
            raise BadInputError(f"{path}: exception #{index + 1}: `test` is not a valid regex ({exc}); {shape}") from exc
        found.append(Exception_(pattern, entry["reason"], tuple(entry.get("backends") or ()), tuple(str(m) for m in entry.get("minors") or ())))
    return found


def matching(entries: list[Exception_], name: str, backend: str, minor: str) -> Exception_ | None:
    """The first entry that excepts spec `name` on `backend` and `minor`, or None."""
    return next((e for e in entries if e.applies(name, backend, minor)), None)
