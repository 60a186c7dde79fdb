"""`dra-testbed try` input checks: one line, exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostenv.processes import run_child
from suites.nvidia.conftest import plugin_absent_env
from testbed.cli.main import build_parser
from testbed.cli.try_cmd import bed_name, cluster_spec, driver_spec, resolve_fleet
from testbed.clusters.driver import DriverSpec
from testbed.drivers.nvidia.binary import PLUGIN_ENV
from testbed.outcomes.manifests import ManifestError, load

from .conftest import EXAMPLES, H100_ONLY


def _try(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_child([sys.executable, "-m", "testbed.cli", "try", *args], capture_output=True, text=True, timeout=120,
                     env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, message", [
    (["missing.yaml", "--fleet", "h100-only"], "cannot read missing.yaml"),
    ([str(EXAMPLES), "--fleet", "no-such-fleet"], "no fleet layout 'no-such-fleet'"),
    ([str(EXAMPLES), "--fleet", "h100-only", "--output", "pdf"], "invalid choice: 'pdf'"),
    ([str(EXAMPLES), "--fleet", "h100-only", "--k8s", "1.20"], "unknown Kubernetes minor"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    out = _try(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_documents_without_kind_or_name_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {labels: {a: b}}\n")
    with pytest.raises(ManifestError, match=r"a.yaml:1: Pod without metadata.name or metadata.generateName"):
        load([tmp_path])
    (tmp_path / "a.yaml").write_text("just: text\n")
    with pytest.raises(ManifestError, match="not a Kubernetes object"):
        load([tmp_path / "a.yaml"])
    (tmp_path / "a.yaml").write_text("kind: [\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load([tmp_path / "a.yaml"])
    # YAML parses it, Python refuses it (a ValueError, once a traceback)
    (tmp_path / "a.yaml").write_text(f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{priority: {'9' * 5000}}}\n")
    with pytest.raises(ManifestError, match=r"a.yaml has a value that cannot be read \(Exceeds the limit \(4300 digits\)"):
        load([tmp_path / "a.yaml"])


def test_examples_load_in_creation_order() -> None:
    kinds = [m.kind for m in load([EXAMPLES])]
    first_workload = min(i for i, k in enumerate(kinds) if k in ("Pod", "Deployment"))
    assert all(k in ("ResourceClaimTemplate", "ResourceClaim") for k in kinds[:first_workload])
    assert {"Pod", "Deployment", "ResourceClaim", "ResourceClaimTemplate"} <= set(kinds)


def test_fleet_by_name_or_path() -> None:
    assert resolve_fleet("h100-only") == resolve_fleet(str(H100_ONLY))


def test_driver_flag_goes_through_the_seam_or_says_it_is_missing(tmp_path: Path) -> None:
    layout = resolve_fleet("h100-only")
    assert cluster_spec("x", "1.34", layout, DriverSpec()).driver.driver == "ours"  # a DriverSpec through the seam
    # without NVIDIA's binary: one line naming how to give it, exit 2, before anything starts
    out = _try(str(EXAMPLES), "--fleet", "h100-only", "--driver", "nvidia", env=plugin_absent_env(tmp_path / "no-plugin"))
    assert out.returncode == 2 and PLUGIN_ENV in out.stderr and len(out.stderr.strip().splitlines()) == 1
    # with a binary: NVIDIA's driver from it, which KWOK runs as a process per node
    plugin = tmp_path / "gpu-kubelet-plugin"
    plugin.write_text("#!/bin/sh\nexit 1\n")
    plugin.chmod(0o755)
    args = build_parser().parse_args(["try", str(EXAMPLES), "--fleet", "h100-only", "--driver", "nvidia", "--driver-binary", str(plugin)])
    spec = driver_spec(args)
    assert (spec.driver, spec.path) == ("nvidia", str(plugin.resolve()))
    assert bed_name(layout, "1.34", spec).endswith("-nvidia")
    # an image: KWOK cannot run one, refused in one line, exit 2
    out = _try(str(EXAMPLES), "--fleet", "h100-only", "--driver", "nvidia", "--driver-image", "vendor/plugin:v1")
    assert out.returncode == 2 and "kwok backend cannot run driver 'nvidia' from 'image'" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_html_report_lists_claims_classes_and_warnings() -> None:
    """The HTML page says what the terminal says: every ResourceClaim of the input (devices, or why not), every
    DeviceClass (what it selects), and the field warnings."""
    from html.parser import HTMLParser

    from testbed.outcomes.claims import ClaimOutcome, ClassOutcome
    from testbed.outcomes.explain import Allocation
    from testbed.outcomes.render import as_html
    from testbed.outcomes.run import RunResult

    result = RunResult("h100-only", "1.34", "v1.34.4", claims=[
        ClaimOutcome("try-1", "shared-gpu", "allocated", [Allocation("shared-gpu", "r", "gpu-0", "n0", "h100-80gb")], ["p0"]),
        ClaimOutcome("team-a", "orphan", "unallocated", reasons=["no pod uses it, so the scheduler never allocates it"])],
        device_classes=[ClassOutcome("fast-gpus", 0, problem="selects no published device")],
        warnings=["claims.yaml:7: ResourceClaim orphan: unknown field spec.spec"])

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.rows: list[list[str]] = []
            self.items: list[str] = []
            self.where: list[str] = []

        def handle_starttag(self, tag, attrs):
            self.where.append(tag)
            if tag == "tr":
                self.rows.append([])

        def handle_endtag(self, tag):
            self.where.pop()

        def handle_data(self, data):
            if data.strip() and "td" in self.where:
                self.rows[-1].append(data.strip())
            elif data.strip() and "li" in self.where:
                self.items.append(data.strip())

    page = Cells()
    page.feed(as_html([result], "try"))
    rows = [r for r in page.rows if r]
    assert ["shared-gpu", "allocated"] == rows[0][:2] and any("gpu-0" in cell and "n0" in cell for cell in rows[0]), rows
    assert rows[1][:2] == ["team-a/orphan", "unallocated"] and "no pod uses it" in rows[1][-1], rows
    assert rows[2] == ["fast-gpus", "0", "selects no published device"], rows
    assert "warning: claims.yaml:7: ResourceClaim orphan: unknown field spec.spec" in page.items
