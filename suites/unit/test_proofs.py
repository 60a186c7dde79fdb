"""The proofs plugin: a table of scenario, claim, where it landed and verdict; the same rows in junit (xunit2) and HTML."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SAMPLE = '''
import pytest

def test_lands(record_proof):
    """A 100Gi claim lands on a B200."""
    record_proof("claim", "1 GPU, memory >= 100Gi [whole]")
    record_proof("landed", "b200-0 gpu-3")
    with pytest.raises(ValueError, match="unknown column 'where'; valid: claim, landed"):
        record_proof("where", "b200-0")

@pytest.mark.parametrize("count", [8, 9])
def test_fits(count):
    assert count <= 8, "9 GPUs on an 8-GPU node"

def test_skipped():
    pytest.skip("no MIG node in this layout")
'''


def test_table_junit_and_html_say_what_was_proved(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    report, junit = tmp_path / "out" / "report.html", tmp_path / "out" / "junit.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "test_sample.py", "-q", "-p", "testbed.pytest.proofs", "-p", "no:cacheprovider",
                          "--proof-report", str(report), "--junitxml", str(junit), "-o", "junit_family=xunit2",
                          "--proof-title", "sample"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout
    assert "warning" not in run.stdout  # record_property warned at each call: its properties are no xunit2
    table = run.stdout[run.stdout.index("What this run proved"):]
    assert "A 100Gi claim lands on a B200." in table and "1 GPU, memory >= 100Gi [whole]" in table and "b200-0 gpu-3" in table
    assert "fits [9]" in table and "9 GPUs on an 8-GPU node" in table and "no MIG node in this layout" in table
    assert "2 pass, 1 fail, 1 skip" in table
    page = report.read_text()
    assert "<title>dra-testbed: sample</title>" in page and "memory &gt;= 100Gi" in page  # escaped user text
    assert page.count('class="verdict pass"') == 2 and page.count('class="verdict fail"') == 1
    suite = ET.parse(junit).find("testsuite")
    assert not [case.get("name") for case in suite.iter("testcase") if case.find("properties") is not None]  # xunit2 has none there
    properties = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert properties == {"test_sample.py::test_lands::claim": "1 GPU, memory >= 100Gi [whole]",
                          "test_sample.py::test_lands::landed": "b200-0 gpu-3"}
