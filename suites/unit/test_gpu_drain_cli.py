"""`dra-testbed gpu drain|undrain` without a cluster: its rule names and its bad input (the live drain runs in
suites/health/test_device_taint_rules_live.py)."""

from __future__ import annotations

import sys

import pytest

from hostenv.processes import run_child
from testbed.cli.gpu_drain import rule_name


def test_a_rule_per_node_and_device_named_validly() -> None:
    assert rule_name("gpu-node-0", None) == "drain-gpu-node-0"
    assert rule_name("Node_1", "gpu-0-mig-1g10gb-19-0") == "drain-node-1-gpu-0-mig-1g10gb-19-0"
    assert rule_name("n1", "gpu-0") != rule_name("n1", None)


@pytest.mark.parametrize("args, words", [
    (["drain", "--name", "no-such-cluster-x", "n1"], "no cluster named 'no-such-cluster-x'"),
    (["drain", "--name", "no-such-cluster-x", "n1", "--effect", "Evict"], "invalid choice: 'Evict'"),
    (["undrain"], "the following arguments are required: node"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    run = run_child([sys.executable, "-m", "testbed.cli", "gpu", *args], capture_output=True, text=True, timeout=120)
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert run.returncode == 2 and len(errors) == 1 and words in errors[0], run.stderr
