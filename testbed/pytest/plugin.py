"""pytest fixtures for suites that need a live test bed: setup, assess, teardown.

Options: --backend, --k8s, --layout, --cluster-name; --kubeconfig to use an existing cluster;
--keep-cluster to leave it running afterwards; --reuse-cluster to use a running one of that name (refused,
in one line, when it was brought up with another minor, layout or driver). Every suite brings its clusters
up through the `bed` factory, `bed(layout, driver, env)`, which honours all of these.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pytest
from kubernetes import client

from hostenv.versions import DEFAULT_MINOR
from testbed.kube.apiviews import ApiViews
from testbed.beds import Bed, BedRefused, bed_session
from testbed.clusters.base import Cluster, ClusterSpec
from testbed import drivers as _drivers  # noqa: F401 - every driver under test, registered before the options list them
from testbed.clusters.driver import DriverSpec, DriverSpecError, driver_options, spec_from_options
from testbed.clusters.layout import Layout, load_layout
from testbed.clusters.registry import BACKENDS, cluster_for
from testbed.kube.namespaces import create_namespace
from testbed.pytest.proofs import record_proof  # noqa: F401 - the fixture, for every suite (the table needs -p testbed.pytest.proofs)

SESSION_LABEL = "dra-testbed-e2e"  # the session bed's name, before the suffix
DEFAULT_LAYOUT = Path(__file__).resolve().parents[2] / "clusters" / "layouts" / "mixed-h100-b200.yaml"


@dataclass
class TestBed(ApiViews):
    """A live cluster as the suites see it."""

    __test__ = False  # not a test class, despite the name

    name: str
    kubeconfig: Path
    api: client.ApiClient
    layout: Layout | None
    cluster: Cluster | None = None
    handle: Bed | None = None  # the life cycle's handle: set `handle.failed` to have logs asked for on failure exported


class BedFactory:
    """`bed(layout, driver, env)`: a context manager bringing up a cluster of `layout` running `driver`
    (ours by default) with `env` added to the driver's environment (fault switches), yielding a TestBed.

    The cluster is torn down afterwards unless --keep-cluster; with --keep-cluster or --reuse-cluster its
    name is `label` (default: the layout's name), so a later run can find it, else `label` plus a random
    suffix, so that runs at the same time never meet. --reuse-cluster uses a running cluster of that name
    whose recorded spec matches and refuses one whose spec differs. `images` are loaded into its nodes (kind);
    with `on_failure_logs` its logs are exported when the bed fails (an exception, or `handle.failed` set).
    The life cycle is testbed.beds's.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.opts = config.option

    @contextmanager
    def __call__(self, layout: Layout | None, driver: DriverSpec | None = None, env: dict[str, str] | None = None, *,
                 label: str | None = None, name: str | None = None, backend: str | None = None, k8s: str | None = None,
                 attempts: int = 1, images: Sequence[str] = (), workers_only: bool = False,
                 on_failure_logs: bool = False) -> Iterator[TestBed]:
        opts = self.opts
        keep, reuse = bool(opts.keep_cluster), bool(opts.reuse_cluster)
        label = label or (layout.name if layout else "bed")
        name = name or (label if keep or reuse else f"{label}-{uuid.uuid4().hex[:6]}")
        spec = ClusterSpec(name=name, k8s=k8s or opts.k8s, layout=layout, driver=(driver or DriverSpec()).with_env(env or {}))
        try:
            session = bed_session(spec, cluster_for(backend or opts.backend, name), reuse=reuse, keep=keep, attempts=attempts,
                                  images=images, workers_only=workers_only, on_failure_logs=on_failure_logs)
            with session as handle:
                yield TestBed(name, handle.kubeconfig, handle.api, layout, handle.cluster, handle)
        except BedRefused as exc:
            pytest.fail(f"--reuse-cluster: {exc}; or leave out --reuse-cluster", pytrace=False)


def session_naming(opts) -> dict[str, str | None]:
    """The session bed's `name` (--cluster-name, exactly) and `label` (suffixed unless kept or reused)."""
    return {"name": opts.cluster_name, "label": SESSION_LABEL}


def session_driver(opts) -> DriverSpec:
    """The session bed's driver from the --driver options (the vocabulary every command uses)."""
    return spec_from_options(opts)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dra-testbed")
    group.addoption("--backend", default="kwok", choices=sorted(BACKENDS), help="cluster backend")
    group.addoption("--k8s", default=DEFAULT_MINOR, help="Kubernetes minor of the test bed")
    # no default here: with --kubeconfig, a layout not given means the fleet installed there (None tells them apart)
    group.addoption("--layout", default=None, help=f"layout file of the test bed (default {DEFAULT_LAYOUT.name}; with "
                    "--kubeconfig, the fleet `dra-testbed install` put there)")
    group.addoption("--cluster-name", default=None, help=f"name of the test-bed cluster (default: {SESSION_LABEL} plus a "
                    "random suffix, so that sessions at the same time never meet; exactly that with --keep-cluster or --reuse-cluster)")
    for flag, keywords in driver_options(what="the DRA driver of the session's test bed"):
        group.addoption(flag, **keywords)
    group.addoption("--kubeconfig", default=None, help="run against this existing cluster instead of bringing one up")
    group.addoption("--keep-cluster", action="store_true", help="leave the cluster running after the session")
    group.addoption("--reuse-cluster", action="store_true", help="use a running cluster of that name if there is one")


def pytest_configure(config: pytest.Config) -> None:
    from testbed.host import interrupts

    # SIGTERM/SIGHUP (CI runners, `timeout`) end the session like Ctrl-C: session fixtures tear down
    interrupts.install()


@pytest.fixture(scope="session")
def bed(request: pytest.FixtureRequest) -> BedFactory:
    """The test-bed factory: `with bed(layout, driver, env) as tb: ...` (see BedFactory)."""
    return BedFactory(request.config)


@pytest.fixture(scope="session")
def testbed(request: pytest.FixtureRequest, bed: BedFactory) -> Iterator[TestBed]:
    """The session's cluster: brought up once (setup), shared by tests, torn down at the end."""
    opts = request.config.option
    given = load_layout(opts.layout) if opts.layout else None
    if opts.kubeconfig:
        # someone else's cluster: checked to serve DRA, never started or stopped. No --layout: the fleet
        # `dra-testbed install` put there, if any
        with bed_session(ClusterSpec(name="existing", layout=given), "existing", kubeconfig=opts.kubeconfig) as existing:
            yield TestBed("existing", existing.kubeconfig, existing.api, existing.cluster.layout_or_installed(given))
        return
    try:
        driver = session_driver(opts)
    except DriverSpecError as exc:
        pytest.exit(f"--driver: {exc}", returncode=2)
    # a fixed default name made a second session at the same time (a colleague's, a second CI job) force-replace
    # this one's cluster mid-test: seen in a CI run whose NVIDIA tests lost their bed all at once
    with bed(given or load_layout(DEFAULT_LAYOUT), driver, **session_naming(opts)) as session_bed:
        yield session_bed


@pytest.fixture
def namespace(testbed: TestBed) -> Iterator[str]:
    """A namespace of the test's own, so tests never see each other's claims and pods."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    create_namespace(testbed.core, name, {"dra-testbed.io/test": "true"})
    yield name
    testbed.core.delete_namespace(name, body=client.V1DeleteOptions(grace_period_seconds=0))
