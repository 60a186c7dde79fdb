"""Reading Ginkgo's JSON reports of the upstream suite into per-group counts, checked against a dry run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from testbed.upstream.exceptions import Exception_, matching
from testbed.upstream.groups import ORDER, group_of

COLUMNS = ("passed", "failed", "excepted", "unexpected-pass", "skipped")


@dataclass(frozen=True)
class Spec:
    """One `It` of a Ginkgo report: its full text and the state Ginkgo gave it."""

    name: str
    state: str  # passed, failed, skipped, pending, panicked, interrupted, aborted, timedout
    seconds: float = 0.0
    message: str = ""
    attempts: int = 1  # > 1: it failed first and was run again (--flake-attempts)


def read_specs(path: Path) -> list[Spec]:
    """The `It` specs of a `--ginkgo.json-report` file (suite set-up nodes are left out)."""
    specs = []
    for suite in json.loads(path.read_text()):
        for r in suite.get("SpecReports") or []:
            if r.get("LeafNodeType") != "It":
                continue
            name = " ".join([*r.get("ContainerHierarchyTexts", []), r.get("LeafNodeText", "")]).strip()
            specs.append(Spec(name, r.get("State", ""), (r.get("RunTime") or 0) / 1e9, ((r.get("Failure") or {}).get("Message") or "")[:300],
                              r.get("NumAttempts") or 1))
    return specs


def will_run(dry_run: list[Spec]) -> list[str]:
    """Names of the specs a dry run with the same focus and skip selects."""
    return [s.name for s in dry_run if s.state == "passed"]


@dataclass
class Summary:
    """Outcome of one run: counts per group, the specs behind them, and whether the totals add up."""

    minor: str
    backend: str
    dry_run: int
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (name, why): failed or unexpectedly passed
    excepted: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)
    missing: list[str] = field(default_factory=list)  # selected by the dry run, absent from the run
    flaky: list[tuple[str, int]] = field(default_factory=list)  # (name, attempts): passed only after a retry

    def total(self, column: str) -> int:
        return sum(c.get(column, 0) for c in self.counts.values())

    @property
    def totals_match(self) -> bool:
        """passed + failed + excepted (+ unexpected passes, which fail) = the dry run's count."""
        return self.total("passed") + self.total("failed") + self.total("excepted") + self.total("unexpected-pass") == self.dry_run

    @property
    def ok(self) -> bool:
        return not self.failures and not self.missing and self.totals_match and self.total("skipped") == 0

    def as_dict(self) -> dict:
        return {"minor": self.minor, "backend": self.backend, "dry_run": self.dry_run, "counts": self.counts,
                "totals_match": self.totals_match, "ok": self.ok, "failures": self.failures,
                "excepted": self.excepted, "missing": self.missing, "flaky": self.flaky}


def summarise(minor: str, backend: str, dry_run: list[Spec], run: list[Spec], exceptions: list[Exception_]) -> Summary:
    """Counts per group of `run`; a selected spec that was skipped at run time counts as skipped (a failure)."""
    selected = will_run(dry_run)
    summary = Summary(minor, backend, len(selected))
    for group in ORDER:
        summary.counts[group] = {column: 0 for column in COLUMNS}
    seen = set()
    for spec in run:
        if spec.name not in selected:
            continue
        seen.add(spec.name)
        counts = summary.counts.setdefault(group_of(spec.name), {column: 0 for column in COLUMNS})
        exception = matching(exceptions, spec.name, backend, minor)
        if spec.state == "skipped":
            counts["skipped"] += 1
        elif exception and spec.state == "passed":
            counts["unexpected-pass"] += 1
            summary.failures.append((spec.name, f"passed although excepted ({exception.reason}): remove the exception"))
        elif exception:
            counts["excepted"] += 1
            summary.excepted.append((spec.name, exception.reason))
        elif spec.state == "passed":
            counts["passed"] += 1
            if spec.attempts > 1:
                summary.flaky.append((spec.name, spec.attempts))
        else:
            counts["failed"] += 1
            summary.failures.append((spec.name, f"{spec.state}: {spec.message}"))
    summary.missing = [name for name in selected if name not in seen]
    return summary


def write(summary: Summary, folder: Path) -> Path:
    """summary.json in `folder`; returns its path."""
    path = folder / "summary.json"
    path.write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
    return path


def table(summary: Summary, console: Console) -> None:
    """The per-group table, the totals check and every failure, on `console`."""
    t = Table(title=f"Kubernetes {summary.minor} DRA e2e on {summary.backend}")
    t.add_column("group")
    for column in COLUMNS:
        t.add_column(column, justify="right")
    for group, counts in summary.counts.items():
        t.add_row(group, *(str(counts[c]) for c in COLUMNS))
    t.add_row("total", *(str(summary.total(c)) for c in COLUMNS), style="bold")
    console.print(t)
    verdict = "match" if summary.totals_match else "DO NOT match"
    console.print(f"dry run selects {summary.dry_run}; passed + failed + excepted = "
                  f"{summary.total('passed') + summary.total('failed') + summary.total('excepted') + summary.total('unexpected-pass')}: totals {verdict}")
    for name, why in summary.failures:
        console.print(f"[red]FAIL[/red] {name}: {why}")
    for name in summary.missing:
        console.print(f"[red]MISSING[/red] {name}: selected by the dry run, not in the run's report")
    for name, attempts in summary.flaky:
        console.print(f"[yellow]flaky[/yellow] {name}: passed on attempt {attempts}")
    for name, reason in summary.excepted:
        console.print(f"[yellow]excepted[/yellow] {name}: {reason}")
