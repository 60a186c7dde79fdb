"""Bad driver input through the `up` CLI: one line, exit 2, nothing started."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from hostenv.processes import run_child
from testbed.clusters.kwok import KwokCluster


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ("n=h100-80gb:1:static-mig:nope", "MIG layout 'nope' of h100-80gb is unknown; valid layouts: all-balanced, all-1g.10gb"),
        ("n=b200-180gb:1:static-mig:all-3g.40gb", "MIG layout 'all-3g.40gb' of b200-180gb is unknown; valid layouts: all-balanced, all-1g.23gb"),
        ("n=h100-80gb:1:partitioned", "unknown mode 'partitioned'; valid modes: whole, static-mig:<layout>, dynamic-mig"),
    ],
)
def test_unknown_mode_or_layout_is_one_line_exit_2_and_starts_nothing(node: str, expected: str) -> None:
    name = f"drv-{uuid.uuid4().hex[:8]}"
    try:
        up = run_child([sys.executable, "-m", "testbed.cli", "up", "--name", name, "--node", node],
                       capture_output=True, text=True, env=dict(os.environ), timeout=300)
        assert up.returncode == 2, up.stderr
        lines = up.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], up.stderr
        assert not KwokCluster(name).exists()
    finally:
        KwokCluster(name).delete()
