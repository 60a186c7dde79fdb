"""Run the AI-conformance test binary against a cluster and keep its evidence: results.json (the `go test
-json` event stream, as the tests' README makes it), e2e.log (the tests' verbose output) and junit.xml.

Which tests run: every test the binary lists, less those that cannot apply to a dra-testbed bed (with the
reason, recorded as skipped), narrowed by the caller's regular expression.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hostenv.goenv import go_binary, go_env
from testbed.aiconformance.events import TestResult, parse_events
from testbed.aiconformance.junit import junit_xml
from testbed.aiconformance.source import BuiltTests

GO_PACKAGE = "github.com/kubernetes-sigs/ai-conformance/test"
# tests that cannot pass on any dra-testbed bed, and why: they need software the bed does not have and cannot
# pull (no image registry here)
NOT_APPLICABLE: dict[str, str] = {
    "TestGangScheduling": "needs a gang-scheduling solution (Kueue) installed; the bed has no image registry to pull its controller from",
}
TEST_TIMEOUT = "15m"


@dataclass(frozen=True)
class Plan:
    """The tests to run and the ones left out with the reason."""

    run: list[str]
    not_applicable: dict[str, str]

    def run_pattern(self) -> str:
        return "^(" + "|".join(re.escape(t) for t in self.run) + ")$"


def plan(listed: list[str], select: str | None = None) -> Plan:
    """Of the binary's tests, those to run (matching `select`, a regular expression, when given) and those that
    do not apply here; tests `select` leaves out are neither."""
    chosen = [t for t in listed if select is None or re.search(select, t)]
    return Plan([t for t in chosen if t not in NOT_APPLICABLE], {t: NOT_APPLICABLE[t] for t in chosen if t in NOT_APPLICABLE})


def run_tests(tests: BuiltTests, kubeconfig: Path, chosen: Plan, results: Path, accelerator_type: str = "nvidia",
              echo: Callable[[str], None] | None = None) -> list[TestResult]:
    """Run `chosen` against the cluster of `kubeconfig` through `go tool test2json`, writing results.json,
    e2e.log and junit.xml into `results`; returns every test's and subtest's result."""
    results.mkdir(parents=True, exist_ok=True)
    events_file, log_file = results / "results.json", results / "e2e.log"
    lines: list[str] = []
    if chosen.run:
        args = [go_binary(), "tool", "test2json", "-t", "-p", GO_PACKAGE, str(tests.binary), "-test.v", "-test.run", chosen.run_pattern(),
                "-test.timeout", TEST_TIMEOUT, "-kubeconfig", str(kubeconfig), "-accelerator-type", accelerator_type]
        with events_file.open("w") as sink, log_file.open("w") as log:
            # from the test package's folder, as `go test ./test` runs it
            proc = subprocess.Popen(args, cwd=tests.source / "test", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=go_env())
            assert proc.stdout is not None
            for line in proc.stdout:
                sink.write(line)
                lines.append(line)
                out = _output(line)
                if out is not None:
                    log.write(out)
                    log.flush()
                    if echo:
                        echo(out.rstrip("\n"))
            proc.wait()
    else:
        events_file.write_text("")
        log_file.write_text("no AI-conformance test ran\n")
    parsed, _ = parse_events(lines)
    (results / "junit.xml").write_text(junit_xml(parsed, chosen.not_applicable))
    return parsed


def _output(line: str) -> str | None:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return line
    return event.get("Output") if isinstance(event, dict) and event.get("Action") == "output" else None
