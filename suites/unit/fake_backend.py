"""A backend that starts nothing and records what the test-bed life cycle asks of it, in order: registered under
the backend name "fake" by `registered()` for the life-cycle tests (suites/unit/test_bed_lifecycle.py)."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

from testbed.clusters import registry
from testbed.clusters.base import Cluster, ClusterSpec, ClusterStatus, ImageLoading, spec_record
from testbed.clusters.driver import DriverSpec

JOURNAL_ENV = "FAKE_BED_JOURNAL"  # a file each delete is also written to


class FakeCluster(Cluster, ImageLoading):
    """Running clusters are entries of `running` (name -> recorded spec); `calls` is the journal; `on_create`
    and `on_delete` are what each next create / delete does first (an exception to raise, or a callable)."""

    backend = "fake"
    running: dict[str, dict] = {}
    calls: list[str] = []
    on_create: list[BaseException | Callable[[], None] | None] = []
    on_delete: list[Callable[[], None]] = []

    def create(self, spec: ClusterSpec, force: bool = False) -> Path:
        self.calls.append("create")
        self.running[self.name] = spec_record(spec)  # started before anything can fail, as a real backend's processes
        _do(self.on_create.pop(0) if self.on_create else None)
        return Path(f"/nonexistent/{self.name}/kubeconfig")

    def delete(self) -> None:
        self.calls.append("delete")
        _do(self.on_delete.pop(0) if self.on_delete else None)
        self.running.pop(self.name, None)
        self.calls.append("deleted")
        if os.environ.get(JOURNAL_ENV):  # seen from another process (a bed's guardian)
            with open(os.environ[JOURNAL_ENV], "a") as journal:
                journal.write(f"deleted {self.name} in {os.getpid()}\n")

    def exists(self) -> bool:
        return self.name in self.running

    def status(self) -> ClusterStatus:
        return ClusterStatus(self.name, self.backend, self.name in self.running, None)

    def saved_spec(self) -> dict | None:
        return self.running.get(self.name)

    def kubeconfig(self) -> Path:
        return Path(f"/nonexistent/{self.name}/kubeconfig")

    def api_client(self):
        return SimpleNamespace(close=lambda: self.calls.append("api closed"))

    def load_images(self, *references: str, workers_only: bool = False) -> None:
        self.calls.append(f"load {' '.join(references)}{' workers' if workers_only else ''}")

    def export_logs(self, folder: Path | None = None) -> Path:
        self.calls.append(f"logs {folder}")
        return folder or Path("/nonexistent")

    def deploy_driver(self, driver: DriverSpec) -> None:
        self.calls.append("deploy driver")


def _do(action: BaseException | Callable[[], None] | None) -> None:
    if isinstance(action, BaseException):
        raise action
    if action is not None:
        action()


def signal_self(signum: int = signal.SIGINT) -> Callable[[], None]:
    """An action that sends this process `signum`: its handler runs before os.kill returns."""
    return lambda: os.kill(os.getpid(), signum)


@contextmanager
def registered() -> Iterator[type[FakeCluster]]:
    """The fake backend known to the registry as "fake", with a clean journal, for the duration."""
    FakeCluster.running, FakeCluster.calls, FakeCluster.on_create, FakeCluster.on_delete = {}, [], [], []
    registry._BACKENDS["fake"] = f"{__name__}:FakeCluster"
    try:
        yield FakeCluster
    finally:
        registry._BACKENDS.pop("fake", None)
