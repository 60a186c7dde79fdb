"""Bad input to `dra-testbed conformance`: one line naming what is wrong and what is valid, exit 2, nothing started."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hostenv.processes import run_child
from suites.nvidia.conftest import plugin_absent_env


@pytest.mark.parametrize(("args", "expected"), [
    (["--faults", "nope"], "unknown fault 'nope'; valid: "),
    (["--kubeconfig", "/dev/null", "--backend", "kwok"], "give either --kubeconfig FILE"),
    (["--kubeconfig", "/nonexistent"], "no kubeconfig at /nonexistent"),
    (["--kubeconfig", "/dev/null", "--driver", "nvidia"], "--driver, --driver-binary, --driver-image and --faults need a test bed"),
    (["--profile", "tpu"], "invalid choice: 'tpu'"),
    (["--driver", "gpu.nvidia.com"], "unknown driver 'gpu.nvidia.com'; valid: ours, nvidia (a DRA driver name such as gpu.nvidia.com goes in --driver-name)"),
    (["--driver", "nvidia", "--driver-binary", "/nonexistent"], "--driver-binary '/nonexistent' is not an executable file"),
    (["--driver", "ours", "--driver-binary", sys.executable], "--driver-binary does not go with driver 'ours'"),
    (["--driver", "nvidia", "--driver-binary", sys.executable, "--faults", "wrong-memory"], "--faults switches dra-testbed's own driver on"),
    (["--driver", "nvidia"], "NVIDIA's gpu-kubelet-plugin is needed here"),
    (["--name", "lab"], "--name names a kind test bed"),
    (["--driver", "nvidia", "--driver-binary", __file__], "is not an executable file"),
])
def test_bad_input_is_one_line_exit_2(args: list[str], expected: str, tmp_path) -> None:
    env = {**os.environ, **plugin_absent_env(tmp_path / "no-plugin")}
    run = run_child([sys.executable, "-m", "testbed.cli", "conformance", "--report", str(tmp_path / "r"), *args],
                    capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], run.stderr
    assert not (tmp_path / "r").exists()


class _Stop(Exception):
    """Raised by the stand-in bed: the command got as far as bringing a bed up."""


@pytest.mark.parametrize(("backend", "args", "way", "artifact"), [
    ("kind", ["--driver", "nvidia", "--driver-binary", sys.executable], "binary", sys.executable),
    ("kind", ["--driver", "nvidia", "--driver-image", "vendor/plugin:1"], "image", "vendor/plugin:1"),
    ("kind", ["--driver", "ours"], "ours", None),
    ("kwok", ["--driver", "nvidia", "--driver-binary", sys.executable], "binary", sys.executable),
])
def test_the_bed_runs_the_driver_given(monkeypatch, tmp_path, backend, args, way, artifact) -> None:
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
    assert driver.way == way and driver.name == "gpu.nvidia.com", driver
    assert (driver.path or driver.image) == (str(Path(artifact).resolve()) if way == "binary" else artifact), driver
