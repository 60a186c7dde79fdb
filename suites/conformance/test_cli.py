"""Bad input to `dra-testbed conformance`: one line naming what is wrong and what is valid, exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(("args", "expected"), [
    (["--driver", "gpu.nvidia.com", "--faults", "nope"], "unknown fault 'nope'; valid: "),
    (["--driver", "gpu.nvidia.com", "--kubeconfig", "/dev/null", "--backend", "kwok"], "give either --kubeconfig FILE"),
    (["--driver", "gpu.nvidia.com", "--kubeconfig", "/nonexistent"], "no kubeconfig at /nonexistent"),
    (["--driver", "gpu.nvidia.com", "--profile", "tpu"], "invalid choice: 'tpu'"),
    (["--profile", "gpu"], "the following arguments are required: --driver"),
    (["--driver", "gpu.nvidia.com", "--driver-binary", "/nonexistent"], "no driver binary at /nonexistent"),
    (["--driver", "nvidia", "--driver-binary", sys.executable, "--faults", "wrong-memory"], "--faults switches dra-testbed's own driver on"),
    (["--driver", "nvidia"], "NVIDIA's gpu-kubelet-plugin is needed here"),
    (["--driver", "ours", "--name", "lab"], "--name names a kind test bed"),
    (["--driver", "nvidia", "--driver-binary", __file__], "is not an executable file"),
])
def test_bad_input_is_one_line_exit_2(args: list[str], expected: str, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DRA_TESTBED_NVIDIA_PLUGIN"}
    run = subprocess.run([sys.executable, "-m", "testbed.cli", "conformance", "--report", str(tmp_path / "r"), *args],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], run.stderr
    assert not (tmp_path / "r").exists()


class _Stop(Exception):
    """Raised by the stand-in bed: the command got as far as bringing a bed up."""


@pytest.mark.parametrize(("backend", "args", "kind", "artifact"), [
    ("kind", ["--driver", "nvidia", "--driver-binary", sys.executable], "binary", sys.executable),
    ("kind", ["--driver", "gpu.nvidia.com", "--driver-image", "vendor/plugin:1"], "image", "vendor/plugin:1"),
    ("kind", ["--driver", "ours"], "ours", None),
    ("kwok", ["--driver", "nvidia", "--driver-binary", sys.executable], "binary", sys.executable),
])
def test_the_bed_runs_the_driver_given(monkeypatch, tmp_path, backend, args, kind, artifact) -> None:
    """`conformance --backend kind --driver nvidia --driver-binary|--driver-image` brings up the kind bed with
    that driver (the path `dra-testbed up --backend kind --driver nvidia` takes), as KWOK does with a binary."""
    from contextlib import contextmanager

    from testbed.cli import main as cli
    from testbed.conformance import beds

    seen = []

    @contextmanager
    def stand_in(layout, k8s, driver, *rest, **options):
        seen.append((layout.name, driver))
        raise _Stop
        yield  # pragma: no cover - a generator for contextmanager

    monkeypatch.setattr(beds, f"{backend}_bed", stand_in)
    with pytest.raises(_Stop):
        cli.main(["conformance", "--backend", backend, "--report", str(tmp_path / "r"), *args])
    ((layout, driver),) = seen
    assert layout == {"kind": "conformance-kind", "kwok": "conformance-fleet"}[backend], layout
    assert driver.kind == kind and driver.name == "gpu.nvidia.com", driver
    assert (driver.path or driver.image) == (str(Path(artifact).resolve()) if kind == "binary" else artifact), driver
