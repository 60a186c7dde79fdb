"""`down`, `status` and `kubeconfig` find a cluster by its name whatever its backend (--backend only narrows),
and `dra-testbed` reports the two error roots as one line each: bad input exit 2, the environment exit 1.

The backends here are stand-ins registered in the test (a folder per cluster, no process); one test uses the real
kind class, whose exists() sees the folder before it asks Docker.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fake_gpus.catalog import CatalogError
from hostenv.goenv import GoMissingError
from hostenv.versions import UnknownVersionError
from testbed.cli.main import main
from testbed.clusters import registry
from testbed.clusters.base import Cluster, ClusterError, ClusterSpec, ClusterStatus
from testbed.clusters.driver import DriverSpecError
from testbed.clusters.kind.images.node_image import ImageBuildError
from testbed.clusters.kind.images.rootfs import RootfsError
from testbed.clusters.layout import LayoutError
from testbed.density.trace import TraceError
from testbed.errors import UnknownNameError
from testbed.host.docker.dockerd import DockerError
from testbed.host.hostdeps import HostDepsMissing
from testbed.toolchain.resolve import ToolchainError


class _StandIn(Cluster):
    """A cluster that is its folder: exists while the folder does, `delete` removes it, `status` says it runs."""

    deleted: list[tuple[str, str]] = []
    raises: Exception | None = None  # what kubeconfig() raises instead of answering

    def create(self, spec: ClusterSpec, force: bool = False) -> Path:
        self.home.mkdir(parents=True)
        (self.home / "kubeconfig").write_text("")
        return self.home / "kubeconfig"

    def delete(self) -> None:
        shutil.rmtree(self.home)
        _StandIn.deleted.append((self.backend, self.name))

    def exists(self) -> bool:
        return self.home.is_dir()

    def status(self) -> ClusterStatus:
        return ClusterStatus(self.name, self.backend, True, self.home / "kubeconfig", "v1.34.0", 1, 1)

    def kubeconfig(self) -> Path:
        if _StandIn.raises is not None:
            raise _StandIn.raises
        return super().kubeconfig()

    def load_images(self, *references: str) -> None:
        raise AssertionError("not used")

    def export_logs(self, folder: Path | None = None) -> Path:
        raise AssertionError("not used")

    def deploy_driver(self, driver) -> None:
        raise AssertionError("not used")


class _Kwok(_StandIn):
    backend = "kwok"


class _Kind(_StandIn):
    backend = "kind"


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The kwok and kind backends replaced by stand-ins keeping their clusters under tmp_path; returns `up(backend, name)`."""
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path))
    monkeypatch.setattr("testbed.host.interrupts.install", lambda: False)  # keep pytest's signal handlers
    monkeypatch.setattr(registry, "backend_class", {"kwok": _Kwok, "kind": _Kind}.__getitem__)
    monkeypatch.setattr(_StandIn, "deleted", [])
    monkeypatch.setattr(_StandIn, "raises", None)
    return lambda backend, name: registry.cluster_for(backend, name).create(ClusterSpec(name=name))


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["status", "kubeconfig", "down"])
def test_a_cluster_is_found_in_whichever_backend_holds_it(stand_ins, capsys, command: str) -> None:
    stand_ins("kwok", "dev")
    kubeconfig = stand_ins("kind", "lab")
    code, out, err = _run(capsys, command, "--name", "lab")
    assert code == 0, err
    if command == "status":
        assert out.startswith("kind cluster lab: running")
    elif command == "kubeconfig":
        assert out.strip() == str(kubeconfig)
    else:
        assert _StandIn.deleted == [("kind", "lab")] and "deleted kind cluster 'lab'" in err
    assert [c.backend for c in registry.find_clusters("dev")] == ["kwok"]


@pytest.mark.parametrize("command", ["status", "kubeconfig"])
def test_an_unknown_name_is_one_line_exit_1_listing_the_clusters_that_exist(stand_ins, capsys, command: str) -> None:
    stand_ins("kwok", "dev")
    stand_ins("kind", "lab")
    code, out, err = _run(capsys, command, "--name", "nope")
    assert (code, out) == (1, "")
    assert err == "dra-testbed: error: no cluster named 'nope'; the clusters that exist: dev (kwok), lab (kind)\n"


def test_backend_narrows_the_search(stand_ins, capsys) -> None:
    stand_ins("kwok", "x")
    code, _, err = _run(capsys, "status", "--name", "x", "--backend", "kind")
    assert code == 1 and err == "dra-testbed: error: no kind cluster named 'x'; the clusters that exist: x (kwok)\n"
    code, _, err = _run(capsys, "down", "--name", "x", "--backend", "kind")
    assert code == 0 and _StandIn.deleted == []
    assert err == "no kind cluster named 'x', nothing to do; the clusters that exist: x (kwok)\n"


def test_down_of_an_unknown_name_does_nothing_and_names_what_exists(stand_ins, capsys) -> None:
    code, _, err = _run(capsys, "down", "--name", "nope")
    assert (code, err) == (0, "no cluster named 'nope', nothing to do; no cluster exists\n")
    stand_ins("kind", "lab")
    code, _, err = _run(capsys, "down", "--name", "nope")
    assert code == 0 and _StandIn.deleted == [] and err.endswith("; the clusters that exist: lab (kind)\n")


@pytest.mark.parametrize("command", ["status", "kubeconfig", "down"])
def test_one_name_in_two_backends_is_refused_until_backend_says_which(stand_ins, capsys, command: str) -> None:
    stand_ins("kwok", "lab")
    stand_ins("kind", "lab")
    code, out, err = _run(capsys, command, "--name", "lab")
    assert (code, out, _StandIn.deleted) == (2, "", [])
    assert err == ("dra-testbed: error: clusters named 'lab' exist in kwok and kind; "
                   "say which with --backend kwok or --backend kind\n")
    code, out, err = _run(capsys, command, "--name", "lab", "--backend", "kind")
    assert code == 0, err
    assert _StandIn.deleted == ([("kind", "lab")] if command == "down" else [])


def test_the_kind_backend_is_looked_at_with_its_real_class(monkeypatch, tmp_path: Path, capsys) -> None:
    # the real KindCluster and KwokCluster: kind's exists() sees the cluster's folder before it would ask Docker
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path))
    monkeypatch.setattr("testbed.host.interrupts.install", lambda: False)
    home = tmp_path / "clusters" / "kind" / "lab"
    home.mkdir(parents=True)
    (home / "kubeconfig").write_text("")
    assert [type(c).__name__ for c in registry.find_clusters("lab")] == ["KindCluster"]
    assert _run(capsys, "kubeconfig", "--name", "lab") == (0, f"{home / 'kubeconfig'}\n", "")


BAD_INPUT = [CatalogError("board"), UnknownVersionError("minor"), LayoutError("layout"), DriverSpecError("driver"),
             UnknownNameError("name"), TraceError("trace")]
ENVIRONMENT = [ClusterError("cluster"), ToolchainError("toolchain"), HostDepsMissing("apt"), DockerError("docker"),
               ImageBuildError("image"), RootfsError("rootfs"), GoMissingError("go")]


@pytest.mark.parametrize("error", BAD_INPUT + ENVIRONMENT, ids=lambda e: type(e).__name__)
def test_each_error_root_is_one_line_with_its_exit_code(stand_ins, capsys, error: Exception) -> None:
    # hostenv's, fake_gpus' and testbed's errors alike: one of the two roots, caught once in main
    stand_ins("kwok", "lab")
    _StandIn.raises = error
    code, out, err = _run(capsys, "kubeconfig", "--name", "lab")
    assert (code, out, err) == (2 if error in BAD_INPUT else 1, "", f"dra-testbed: error: {error}\n")


def test_up_refuses_a_name_another_backend_holds(stand_ins, capsys) -> None:
    # one name, one cluster: otherwise down/status/kubeconfig of that name would need --backend from then on
    stand_ins("kind", "lab")
    code, out, err = _run(capsys, "up", "--backend", "kwok", "--name", "lab", "--node", "n=h100-80gb:1:whole")
    assert (code, out) == (2, "")
    assert err == ("dra-testbed: error: a kind cluster named 'lab' exists; give another --name, or take it down first "
                   "(`dra-testbed down --name lab`)\n")
    assert [c.backend for c in registry.find_clusters("lab")] == ["kind"]
