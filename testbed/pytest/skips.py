"""pytest plugin: a skip fails the run unless a committed allowlist names the test and says why.

The allowlist (default: suites/skips.yaml under the rootdir; --skip-allowlist PATH) is a YAML list of
`{test: NODEID-GLOB, reason: WHY}`, each optionally with `when: CONDITION` (a name in CONDITIONS): such an
entry allows the skip only on a machine where the condition holds, so a root CI that skips a test needing
root still fails. A silent skip in CI would read as a pass; this makes every skip a decision someone wrote down.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable

import pytest
import yaml

DEFAULT_ALLOWLIST = Path("suites") / "skips.yaml"
# `when` names -> whether it holds on this machine, asked when a skip is matched
def _ai_conformance_unreachable() -> bool:
    from testbed.aiconformance.source import source_unreachable

    return source_unreachable()


CONDITIONS: dict[str, Callable[[], bool]] = {
    "not root": lambda: os.geteuid() != 0,
    # kubernetes-sigs/ai-conformance is not on the Go module proxy: built from git (GitHub or a clone named by
    # $DRA_TESTBED_AI_CONFORMANCE_REPO), which a machine reaching package registries only cannot fetch
    "ai-conformance source unreachable": _ai_conformance_unreachable,
}


@dataclass(frozen=True)
class AllowedSkip:
    test: str  # fnmatch pattern over the node id
    reason: str
    when: str | None = None  # a CONDITIONS name: the skip is allowed only where it holds; None: anywhere

    def allows(self, nodeid: str) -> bool:
        """Whether this entry allows a skip of `nodeid` on this machine."""
        return fnmatchcase(nodeid, self.test) and (self.when is None or CONDITIONS[self.when]())


def load_allowlist(path: Path) -> list[AllowedSkip]:
    """The entries of `path` (none when it does not exist); pytest.UsageError, one line, on a malformed entry."""
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text()) or []
    except yaml.YAMLError as exc:
        raise pytest.UsageError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(data, list):
        raise pytest.UsageError(f"{path}: expected a list of {{test: NODEID-GLOB, reason: WHY}}")
    entries = []
    for index, entry in enumerate(data):
        if not (isinstance(entry, dict) and isinstance(entry.get("test"), str) and str(entry.get("reason") or "").strip()):
            raise pytest.UsageError(f"{path}: entry {index + 1} needs a `test` pattern and a non-empty `reason`")
        when = entry.get("when")
        if when is not None and when not in CONDITIONS:
            raise pytest.UsageError(f"{path}: entry {index + 1}: unknown `when` {when!r}; valid: {', '.join(map(repr, CONDITIONS))}")
        entries.append(AllowedSkip(entry["test"], str(entry["reason"]).strip(), when))
    return entries


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    return str(longrepr[2]).removeprefix("Skipped: ") if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


class SkipGuard:
    """Collects skips the allowlist does not name and fails the session on them."""

    def __init__(self, allowlist: Path, allowed: list[AllowedSkip]) -> None:
        self.allowlist, self.allowed = allowlist, allowed
        self.unlisted: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail") and not any(e.allows(report.nodeid) for e in self.allowed):
            self.unlisted.append((report.nodeid, _reason(report)))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.unlisted and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:  # noqa: ANN001 - pytest's TerminalReporter
        if not self.unlisted:
            return
        terminalreporter.section(f"skips not in {self.allowlist} (each fails the run)", red=True)
        for nodeid, reason in self.unlisted:
            terminalreporter.line(f"{nodeid}: {reason}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("dra-testbed").addoption(
        "--skip-allowlist", default=None, help=f"YAML list of allowed skips (default: {DEFAULT_ALLOWLIST} under the rootdir)")


def pytest_configure(config: pytest.Config) -> None:
    path = Path(config.option.skip_allowlist) if config.option.skip_allowlist else config.rootpath / DEFAULT_ALLOWLIST
    config.pluginmanager.register(SkipGuard(path, load_allowlist(path)), "dra-testbed-skip-guard")
