"""Scheduling properties on a live cluster: Hypothesis profiles, the shared property cluster, bundles.

Profiles `ci`, `dev`, `nightly` are registered here; pick one with `--hypothesis-profile NAME` (when
this directory is on the command line) or $DRA_TESTBED_HYPOTHESIS_PROFILE (always). The example
database lives in $DRA_TESTBED_HYPOTHESIS_DB (default: Hypothesis's `.hypothesis/examples`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client, config

from testbed.clusters.driver import OURS, DriverSpec
from testbed.clusters.layout import Layout
from testbed.workloads.bundle import default_root, layout_from_nodes, layout_yaml
from testbed.workloads.profiles import DYNAMIC_LAYOUT, FAULT_LAYOUT, WHOLE_LAYOUT  # noqa: F401 - registers the profiles; the suites import the fleets from here

@dataclass
class PropertyBed:
    """The cluster the properties run on."""

    api: client.ApiClient
    layout: Layout
    layout_yaml: str
    bundles: Path
    brought_up: bool = True  # False: the --kubeconfig cluster, whose layout is whatever it has
    nvml_home: Path | None = None  # a KWOK bed's home: its nodes' fake NVML is local (<home>/nvml/<node>)
    driver_kind: str = OURS  # the driver under test (testbed/drivers/<kind>): which known leaks the check excuses

    def machine_fields(self, stats: dict[str, int] | None = None) -> dict:
        """The runner fields of the machines on this bed: on a KWOK bed, every node's NVML judged against its
        prepared claims after every step (testbed.workloads.physical_watch), its count and cost added to `stats`."""
        if self.nvml_home is None:
            return {}
        from fake_gpus.driver.identity import current_identity
        from testbed.workloads.physical import KNOWN_LEAKS, MPS_NOT_RUN
        from testbed.workloads.physical_watch import PhysicalCheck, kwok_state_dirs

        check = PhysicalCheck(self.api, kwok_state_dirs(self.nvml_home), current_identity().driver,
                              leaks=KNOWN_LEAKS.get(self.driver_kind, ()), stats=stats if stats is not None else {},
                              mps=self.driver_kind not in MPS_NOT_RUN)
        return {"node_check": check}


def bring_up(request: pytest.FixtureRequest, layout: Layout, label: str, env: dict[str, str] | None = None,
             driver: DriverSpec | None = None, attempts: int = 1, k8s: str | None = None) -> Iterator[PropertyBed]:
    """A fresh cluster of `layout` from the `bed` factory (or the --kubeconfig cluster) running `driver`
    (ours by default), tried `attempts` times, of minor `k8s` (default --k8s); `env` reaches the driver (faults)."""
    opts = request.config.option
    bundles = default_root() / label
    if opts.kubeconfig and env is None and driver is None:
        api = config.new_client_from_config(config_file=opts.kubeconfig)
        try:
            observed = layout_from_nodes(client.CoreV1Api(api))
            yield PropertyBed(api, observed, layout_yaml(observed), bundles, brought_up=False)
        finally:
            api.close()
        return
    with request.getfixturevalue("bed")(layout, driver, env=env, label=f"prop-{label}", attempts=attempts, k8s=k8s) as testbed:
        local = testbed.cluster is not None and testbed.cluster.backend == "kwok"
        yield PropertyBed(testbed.api, layout, layout_yaml(layout), bundles, nvml_home=testbed.cluster.home if local else None,
                          driver_kind=driver.driver if driver is not None else OURS)


@pytest.fixture(scope="session")
def whole_bed(request: pytest.FixtureRequest) -> Iterator[PropertyBed]:
    """A cluster (KWOK unless --backend) of whole GPUs shared by every example (each example has its own namespace)."""
    yield from bring_up(request, WHOLE_LAYOUT, "whole")


@pytest.fixture(scope="session")
def dynamic_bed(request: pytest.FixtureRequest) -> Iterator[PropertyBed]:
    """A cluster (KWOK unless --backend) of partitionable and static MIG GPUs."""
    yield from bring_up(request, DYNAMIC_LAYOUT, "dynamic")


@pytest.fixture(scope="module")
def dynamic_nodes(dynamic_bed: PropertyBed) -> dict[str, str]:
    """The dynamic bed's partitionable nodes, with the catalog board of their GPUs."""
    from testbed.workloads.scenarios import partitionable_nodes

    nodes = partitionable_nodes(dynamic_bed.api)
    if not nodes and dynamic_bed.brought_up:
        # the bed's layout has dynamic-MIG nodes: finding none means the driver or the nodes are broken
        wanted = sorted(n.name for n in dynamic_bed.layout.nodes if n.mode.kind == "dynamic-mig")
        pytest.fail(f"the bed brought up partitionable nodes {wanted} but the cluster shows none", pytrace=False)
    if not nodes:
        pytest.skip("the --kubeconfig cluster has no partitionable (dynamic MIG) GPUs")  # allowed in suites/skips.yaml
    return nodes


def bundle_dir(bed: PropertyBed, request: pytest.FixtureRequest) -> Path:
    """Where a failing example of this test leaves its replay bundle."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in request.node.name)
    return bed.bundles / safe


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Name the replay bundle in the failure report, so a CI log says what to replay."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and call.excinfo is not None:
        bundle = getattr(call.excinfo.value, "bundle", None)
        if bundle:
            report.sections.append(("replay bundle", f"dra-testbed replay {bundle}"))
