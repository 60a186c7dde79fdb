"""Running the upstream DRA suite (`e2e.test`) against a kubeconfig: a dry run for the count, then the run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hostenv.processes import run_group, stream
from testbed.host import progress
from testbed.upstream.exceptions import Exception_
from testbed.upstream.report import Summary, read_specs, summarise

DRA_FOCUS = r"\[DRA\]"
# Seconds an interrupted run gets to finish: Ginkgo gives a spec's clean-up nodes 30 s (--grace-period),
# then reports; namespace deletion on a loaded bed takes a while.
INTERRUPT_GRACE = 90.0
# KWOK has no kubelets: only the control-plane group runs there. On kind everything runs, the serial,
# slow and alpha ([Feature:OffByDefault]) specs too: the bed switches those gates on (clusters/features.py).
# [Flaky] specs are left out on both, as upstream's own kind DRA jobs do (label filter `... && !Flaky` in
# kubernetes/test-infra config/jobs/kubernetes/sig-node/dra.jinja); `--skip ''` runs them. On 1.34 the one
# Flaky DRA spec ("supports extended resources together with ResourceClaim") leaves `example.com/resource: 0`
# on its node, and the next extended-resource spec then fails there (kubernetes/kubernetes#133488, fixed in
# 1.35 by #133784).
FLAKY = r"\[Flaky\]"
DEFAULT_SKIP = {
    "kwok": r"\[Feature:DynamicResourceAllocation\]|\[Feature:OffByDefault\]|\[Serial\]|\[Slow\]|" + FLAKY,
    "kind": FLAKY,
}


@dataclass(frozen=True)
class Selection:
    """Which specs: Ginkgo focus and skip regexes (RE2)."""

    focus: str = DRA_FOCUS
    skip: str = ""

    def args(self) -> list[str]:
        return [f"--ginkgo.focus={self.focus}"] + ([f"--ginkgo.skip={self.skip}"] if self.skip else [])


def _base(binary: Path, kubeconfig: Path, selection: Selection) -> list[str]:
    return [str(binary), f"--kubeconfig={kubeconfig}", "--provider=skeleton", "--ginkgo.no-color", *selection.args()]


def dry_run(binary: Path, kubeconfig: Path, selection: Selection, folder: Path) -> Path:
    """`--ginkgo.dry-run` with the selection; returns its JSON report (selected specs show as passed)."""
    report = folder / "dry-run.json"
    log = folder / "dry-run.log"
    out = run_group([*_base(binary, kubeconfig, selection), "--ginkgo.dry-run", f"--ginkgo.json-report={report}"], timeout=300)
    log.write_text(out.stdout + out.stderr)
    if not report.is_file():
        raise RuntimeError(f"e2e.test --ginkgo.dry-run wrote no report (log: {log})")
    return report


def _parallel(ginkgo: Path, procs: int, binary: Path, kubeconfig: Path, selection: Selection, folder: Path, timeout_min: int,
              attempts: int) -> list[str]:
    """The ginkgo CLI over the compiled e2e.test: `procs` processes, [Serial] specs alone at the end."""
    return [str(ginkgo), f"--procs={procs}", f"--flake-attempts={attempts}", "--no-color", "-v", f"--focus={selection.focus}",
            *([f"--skip={selection.skip}"] if selection.skip else []), f"--timeout={timeout_min}m",
            f"--junit-report={folder.resolve() / 'junit.xml'}", f"--json-report={folder.resolve() / 'report.json'}", str(binary),
            "--", f"--kubeconfig={kubeconfig}", "--provider=skeleton", f"--report-dir={folder}"]


def run(binary: Path, kubeconfig: Path, selection: Selection, folder: Path, timeout_min: int,
        procs: int = 1, ginkgo: Path | None = None, attempts: int = 1) -> Path:
    """The run itself: junit.xml and report.json in `folder`, the suite's output in e2e.log, progress per spec.
    With `procs` > 1 the ginkgo CLI (`ginkgo`) runs the specs in that many processes; a failed spec is run
    up to `attempts` times (the summary lists those that needed it)."""
    report = folder / "report.json"
    log = folder / "e2e.log"
    if procs > 1 and ginkgo is not None:
        args = _parallel(ginkgo, procs, binary, kubeconfig, selection, folder, timeout_min, attempts)
    else:
        args = [*_base(binary, kubeconfig, selection), "--ginkgo.v", f"--ginkgo.timeout={timeout_min}m", f"--ginkgo.flake-attempts={attempts}",
                f"--ginkgo.junit-report={folder / 'junit.xml'}", f"--ginkgo.json-report={report}", f"--report-dir={folder}"]
    # line-buffered: the log is what one watches while a run of an hour goes on
    with progress.step(f"upstream DRA e2e (log: {log})") as current, log.open("w", buffering=1) as sink:
        def take(line: str) -> None:
            sink.write(line)
            # Ginkgo -v closes every spec with a line starting "•" (passed) or a "[FAILED]"/"[SKIPPED]" marker
            if line.startswith("•") or line.startswith("S [SKIPPED]"):
                current.tick(line.strip())
            else:
                current.update(f"{current.count} specs done")

        # Its own process group: ginkgo does not pass a signal on to its workers (a terminal's Ctrl-C reaches
        # them through the foreground group, a SIGTERM to us would not), so an interruption goes to the whole
        # group, which then has INTERRUPT_GRACE seconds to run the specs' clean-ups and write its reports.
        try:
            stream(args, take, grace=INTERRUPT_GRACE)
        except KeyboardInterrupt:
            progress.note(f"upstream DRA e2e interrupted; what ran is in {report} and {log}")
            raise
    if not report.is_file():
        raise RuntimeError(f"e2e.test wrote no report (log: {log})")
    return report


def run_suite(binary: Path, kubeconfig: Path, selection: Selection, folder: Path, *, minor: str, backend: str,
              exceptions: list[Exception_], timeout_min: int = 60, procs: int = 1, ginkgo: Path | None = None,
              attempts: int = 1) -> Summary:
    """Dry run, run, and the summary of both."""
    folder.mkdir(parents=True, exist_ok=True)
    selected = read_specs(dry_run(binary, kubeconfig, selection, folder))
    done = read_specs(run(binary, kubeconfig, selection, folder, timeout_min, procs, ginkgo, attempts))
    return summarise(minor, backend, selected, done, exceptions)
