"""pytest plugin: what a run proved, as a short table at its end and as an HTML report (the report style).

A test says what it proved with the `record_proof` fixture: `claim` (what was asked, e.g. "1 GPU with memory
>= 100Gi") and `landed` (where it went, e.g. "b200-0 gpu-3 (NVIDIA B200)"). The junit XML (`--junitxml`) gets
them as properties of the test suite, `<nodeid>::claim` and `<nodeid>::landed`: pytest's `record_property` puts
them in the <testcase>, which junit_family xunit2 (pytest's default) does not allow, and warns at each call.
The scenario is the first line of the test's docstring, else its name.

Use: `pytest -p testbed.pytest.proofs [--proof-report reports/e2e/report.html]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from testbed.templates import render_html

VERDICT_STYLE = {"pass": "green", "fail": "red", "error": "red", "skip": "yellow"}
COLUMNS = ("claim", "landed")  # what a test may record of what it proved
PROVED = pytest.StashKey[dict[str, str]]()  # on the test item: column -> value


@pytest.fixture
def record_proof(request: pytest.FixtureRequest,
                 record_testsuite_property: Callable[[str, object], None]) -> Callable[[str, object], None]:
    """record_proof(column, value): `claim` or `landed` of the calling test, for the table, the HTML report and
    the junit XML (a test suite property `<nodeid>::<column>`, which xunit2 allows)."""

    def record(column: str, value: object) -> None:
        if column not in COLUMNS:
            raise ValueError(f"record_proof: unknown column {column!r}; valid: {', '.join(COLUMNS)}")
        request.node.stash.setdefault(PROVED, {})[column] = str(value)
        record_testsuite_property(f"{request.node.nodeid}::{column}", str(value))

    return record


@dataclass
class Proof:
    """One test's row."""

    nodeid: str
    scenario: str
    claim: str = ""
    landed: str = ""
    verdict: str = "pass"
    seconds: float = 0.0
    detail: str = ""


def scenario_of(item: pytest.Item) -> str:
    """The first docstring line, else the test name as words (parameters kept)."""
    doc = getattr(getattr(item, "function", None), "__doc__", None)
    if doc and doc.strip():
        return doc.strip().splitlines()[0]
    name = item.name.removeprefix("test_")
    base, _, params = name.partition("[")
    return base.replace("_", " ") + (f" [{params}" if params else "")


class Proofs:
    """Collects a Proof per test from its reports."""

    def __init__(self, report: Path | None) -> None:
        self.report = report
        self.rows: dict[str, Proof] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):  # noqa: ANN001 - pytest's CallInfo
        outcome = yield
        report = outcome.get_result()
        row = self.rows.setdefault(item.nodeid, Proof(item.nodeid, scenario_of(item)))
        row.seconds += report.duration
        properties = {**dict(item.user_properties), **item.stash.get(PROVED, {})}  # a record_property (xunit1) too
        row.claim = str(properties.get("claim", row.claim))
        row.landed = str(properties.get("landed", row.landed))
        if report.skipped:
            row.verdict, row.detail = "skip", _reason(report)
        elif report.failed:
            row.verdict = "fail" if report.when == "call" else "error"
            row.detail = _reason(report)

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
        if not self.rows:
            return
        console = Console(file=terminalreporter._tw._file, width=max(140, terminalreporter._tw.fullwidth), highlight=False)
        grid = Table(title="What this run proved", show_lines=False)
        for column in ("scenario", "claim", "where it landed", "verdict"):
            grid.add_column(column, overflow="fold")
        for row in self.rows.values():
            style = VERDICT_STYLE[row.verdict]
            grid.add_row(escape(row.scenario), escape(row.claim), escape(row.landed or row.detail), f"[{style}]{row.verdict}[/{style}]")
        console.print(grid)
        counts = {v: sum(r.verdict == v for r in self.rows.values()) for v in VERDICT_STYLE}
        console.print(", ".join(f"{n} {v}" for v, n in counts.items() if n))
        if self.report:
            self.report.parent.mkdir(parents=True, exist_ok=True)
            self.report.write_text(render_html("proofs.html.j2", title=f"dra-testbed: {config.getoption('proof_title')}",
                                               rows=list(self.rows.values()), counts=counts))
            console.print(f"report: {self.report}")


def _reason(report) -> str:  # noqa: ANN001 - pytest's TestReport
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
    lines = [line.removeprefix("E").strip() for line in text.splitlines() if line.startswith("E ")]
    return (lines or text.strip().splitlines()[-1:] or [""])[0][:300]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dra-testbed proofs")
    group.addoption("--proof-report", default=None, help="write the HTML report of what was proved to this file")
    group.addoption("--proof-title", default="what was proved", help="title of that report")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("proof_report")
    config.pluginmanager.register(Proofs(Path(path) if path else None), "dra-testbed-proofs")
