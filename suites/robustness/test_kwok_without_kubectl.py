"""A KWOK bed needs no kubectl on PATH. kwokctl looks for one there and, on a fresh machine that has none,
downloads it from dl.k8s.io, retrying every second: offline, that held every KWOK bed of `nox -s fresh` for
minutes (this machine's image ships a kubectl of its own, which hid it). kwokctl is given ours instead."""

from __future__ import annotations

import filecmp
import os
import shutil
from pathlib import Path

import pytest

from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.toolchain.resolve import ensure

LAYOUT = Layout((NodeSpec("nokubectl-a", "h100-80gb", 1, Mode("whole")),), name="nokubectl")


@pytest.mark.cluster
@pytest.mark.slow
def test_a_kwok_bed_comes_up_with_no_kubectl_on_path_and_kwokctl_takes_ours(bed, request, monkeypatch) -> None:
    # setup: PATH as on a fresh machine, without any kubectl
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "kubectl").exists())
    monkeypatch.setenv("PATH", path)
    assert shutil.which("kubectl") is None
    # assess: the bed comes up, and the kubectl kwokctl installed for it is ours, not a download
    with bed(LAYOUT, label="nokubectl", backend="kwok") as testbed:
        ours = ensure(request.config.option.k8s, ("kubectl",)).path("kubectl")
        taken = testbed.cluster.kwok_dir / "bin" / "kubectl"
        assert taken.is_file(), f"kwokctl installed no kubectl in {taken.parent}: {sorted(p.name for p in taken.parent.iterdir())}"
        assert filecmp.cmp(taken, ours, shallow=False), f"{taken} is not the toolchain's {ours}"
