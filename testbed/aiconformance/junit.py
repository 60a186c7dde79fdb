"""junit.xml of an AI-conformance run: every test and subtest the binary ran, and the tests that do not apply
to the bed as skipped with the reason. Test case names are the Go names, which the checklist's evidence links
(`junit.xml#TestName`) point at."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Mapping, Sequence

from testbed.aiconformance.events import FAIL, PASS, SKIP, TestResult

SUITE = "kubernetes-sigs/ai-conformance"


def _message(result: TestResult) -> str:
    """The line that says what failed: the first FAIL/VIOLATION/ERROR the test logged, else its last line."""
    for line in result.output:
        if any(word in line for word in ("FAIL:", "VIOLATION", "ERROR", "Error", "failed")) and not line.lstrip().startswith("---"):
            return line.strip()
    return (result.output[-1].strip() if result.output else "failed")[:500]


def junit_xml(results: Sequence[TestResult], not_applicable: Mapping[str, str], name: str = SUITE) -> str:
    """The junit document: a testcase per result (classname: the parent test, or the suite for top-level
    tests), failures with the test's output, unfinished tests as errors, not-applicable tests as skipped."""
    failures = sum(r.verdict == FAIL for r in results)
    errors = sum(r.verdict not in (PASS, FAIL, SKIP) for r in results)
    skipped = sum(r.verdict == SKIP for r in results) + len(not_applicable)
    top_level = sum(r.elapsed for r in results if r.parent is None)
    suite = ET.Element("testsuite", name=name, tests=str(len(results) + len(not_applicable)), failures=str(failures),
                       errors=str(errors), skipped=str(skipped), time=f"{top_level:.3f}")
    failing_children: dict[str, list[str]] = {}
    for result in results:
        if result.parent and result.verdict == FAIL:
            failing_children.setdefault(result.parent, []).append(result.name.rpartition("/")[2])
    for result in results:
        case = ET.SubElement(suite, "testcase", classname=result.parent or name, name=result.name, time=f"{result.elapsed:.3f}")
        text = "\n".join(result.output)
        if result.verdict == FAIL:
            children = failing_children.get(result.name)
            message = f"failed subtests: {', '.join(children)}" if children else _message(result)
            ET.SubElement(case, "failure", message=message).text = text
        elif result.verdict == SKIP:
            ET.SubElement(case, "skipped", message=_message(result))
        elif result.verdict != PASS:
            ET.SubElement(case, "error", message="the test binary ended before this test did").text = text
        ET.SubElement(case, "system-out").text = text
    for test, reason in sorted(not_applicable.items()):
        case = ET.SubElement(suite, "testcase", classname=name, name=test, time="0.000")
        ET.SubElement(case, "skipped", message=f"not applicable: {reason}")
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
