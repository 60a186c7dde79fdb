"""A test bed's life cycle, the one every user of a throwaway cluster goes through: reuse or create (with retries
after a start error), images loaded, the bed handed out, logs exported, torn down.

The teardown is owed from before `create` starts: an interrupt (Ctrl-C, or SIGTERM/SIGHUP, which
testbed.host.interrupts turns into the same exception) at any moment of the creation removes whatever had started,
through the backend's `delete`, which is safe on a half-made cluster. A signal that lands while the teardown runs
does not cut it short (see `_teardown`), and a guardian process removes the bed should this process be killed
before it could (testbed.beds.guard).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Literal, Sequence

from testbed.beds import guard
from testbed.clusters.base import Cluster, ClusterError, ClusterSpec, ClusterStartError, ImageLoading, ability, spec_mismatch
from testbed.clusters.existing import ExistingCluster
from testbed.clusters.registry import cluster_for
from testbed.host import progress

if TYPE_CHECKING:
    from kubernetes import client

ClientKind = Literal["plain", "retrying"]


class BedRefused(ClusterError):
    """A running cluster of the bed's name cannot be reused as asked: it was brought up from another spec."""


@dataclass
class Bed:
    """A bed while it is handed out: its cluster, kubeconfig and API client (None where none was asked for).

    `failed` may be set by whoever uses the bed when what ran on it failed without raising (a pytest session's
    failed tests), so that logs asked for on failure are exported; an exception out of the bed sets it too."""

    cluster: Cluster
    spec: ClusterSpec
    kubeconfig: Path | None = None
    api: client.ApiClient | None = None
    reused: bool = False
    failed: bool = False

    @property
    def name(self) -> str:
        return self.cluster.name


# beds whose teardown is owed now, registered before their creation starts (what an interrupt will remove)
_OWED: list[Bed] = []


def owed() -> list[Bed]:
    """The beds of this process that will be torn down when their session ends, however it ends."""
    return list(_OWED)


@contextmanager
def bed_session(spec: ClusterSpec, backend: str | Cluster, *, reuse: bool = False, replace_mismatch: bool = False,
                keep: bool = False, attempts: int = 1,
                images: Sequence[str] = (), workers_only: bool = False, logs_to: Path | None = None,
                on_failure_logs: bool | Path = False, client: ClientKind | None = "plain",
                kubeconfig: str | None = None, guarded: bool = True) -> Iterator[Bed]:
    """A bed of `spec` on `backend` (a backend name, or a cluster object), torn down afterwards.

    reuse: a running cluster of the name is used as it is when its recorded spec matches (BedRefused, one
        line, when it does not; replaced instead with `replace_mismatch`) and left running; one that exists
        but does not run is replaced.
    keep: left running afterwards (a kept bed keeps its name, so a later run can reuse it).
    attempts: tries of `create` in all; another only after a ClusterStartError (something had started and
        failed), never after a refusal before anything started, which would fail the same way again.
    images: local images loaded into the nodes (also of a reused bed); ClusterError before anything starts
        where the backend's nodes run no containers. `workers_only` leaves out the control plane.
    logs_to: logs exported into this folder when the bed ends, unless by an interrupt (Ctrl-C goes at once).
    on_failure_logs: logs exported when the bed failed (True: into the backend's default folder).
    client: the API client the handle carries: "plain", "retrying" (retries what a loaded control plane
        drops: testbed.kube.apiretry) or None.
    kubeconfig: the cluster's kubeconfig for the `existing` backend, which is checked, never started or stopped.
    guarded: a guardian process removes the bed if this process dies owing its teardown (SIGKILL: testbed.beds.guard).
    """
    cluster = cluster_for(backend, spec.name, kubeconfig) if isinstance(backend, str) else backend
    loader = ability(cluster, ImageLoading) if images else None
    if images and loader is None:
        raise ClusterError(f"the {cluster.backend} backend's nodes run no containers, so images cannot be loaded into them; valid: kind")
    bed = Bed(cluster, spec)
    foreign = isinstance(cluster, ExistingCluster)  # someone else's: create only checks it, nothing is torn down
    bed.reused = reuse and not foreign and _reusable(cluster, spec, replace_mismatch)
    owes_teardown = not (keep or bed.reused or foreign)
    guardian = None
    if owes_teardown:  # before create starts: from here on whatever starts is removed again
        _OWED.append(bed)
        guardian = guard.watch(cluster) if guarded else None  # and also if this process is killed
    ending: BaseException | None = None  # what ends the bed early, if anything
    try:
        bed.kubeconfig = cluster.kubeconfig() if bed.reused else _create(cluster, spec, attempts)
        if loader is not None:
            loader.load_images(*images, workers_only=workers_only)
        if client == "plain":
            bed.api = cluster.api_client()
        elif client == "retrying":
            from testbed.kube.apiretry import retrying_client

            bed.api = retrying_client(str(bed.kubeconfig))
        yield bed
    except BaseException as exc:
        ending = exc
        # an interrupt, or the user's own generator closed, is no failure of the bed
        bed.failed = bed.failed or not isinstance(exc, (KeyboardInterrupt, GeneratorExit))
        raise
    finally:
        try:
            if bed.api is not None:
                bed.api.close()
            if not isinstance(ending, KeyboardInterrupt):
                _export_logs(bed, logs_to, on_failure_logs)
        finally:
            if owes_teardown:
                try:
                    _teardown(cluster, unwinding=ending is not None)
                finally:
                    _OWED.remove(bed)
                    if guardian is not None:
                        guard.release(guardian)


def _reusable(cluster: Cluster, spec: ClusterSpec, replace_mismatch: bool) -> bool:
    """Whether a running cluster of the name can be used as it is; BedRefused when it runs another spec, unless
    that one is to be replaced."""
    if not cluster.exists() or not cluster.status().running:
        return False
    mismatch = spec_mismatch(cluster.saved_spec(), spec)
    if mismatch and replace_mismatch:
        progress.note(f"test bed: replacing {cluster.backend} cluster {cluster.name}: {mismatch}")
        return False
    if mismatch:
        raise BedRefused(f"the running {cluster.backend} cluster {cluster.name!r} cannot be reused: {mismatch}; take it down "
                         f"(`dra-testbed down --backend {cluster.backend} --name {cluster.name}`) or use another name")
    return True


def _create(cluster: Cluster, spec: ClusterSpec, attempts: int) -> Path:
    """create(), tried up to `attempts` times after a start error (a loaded machine has been seen to lose a
    component or leave a KWOK node un-Ready during `up`); create() removes what it started before it raises."""
    for attempt in range(1, attempts + 1):
        try:
            return cluster.create(spec, force=True)
        except ClusterStartError as exc:
            if attempt == attempts:
                raise
            progress.note(f"test bed: retrying cluster {cluster.name} after: {exc}")
    raise ValueError(f"attempts must be at least 1, got {attempts}")


def _export_logs(bed: Bed, logs_to: Path | None, on_failure_logs: bool | Path) -> None:
    """The logs asked for; a failed export is reported, never raised: the logs are evidence, not the verdict."""
    folders: list[Path | None] = []
    if logs_to is not None:
        folders.append(logs_to)
    if bed.failed and on_failure_logs is not False:
        folders.append(None if on_failure_logs is True else Path(on_failure_logs))
    for folder in folders:
        try:
            progress.note(f"test bed: logs of {bed.name} in {bed.cluster.export_logs(folder)}")
        except Exception as exc:  # noqa: BLE001 - see above
            progress.note(f"test bed: could not export the logs of {bed.name}: {type(exc).__name__}: {exc}")


def _teardown(cluster: Cluster, unwinding: bool) -> None:
    """`delete`, run to its end even when the run's first signal lands in it.

    After a first SIGINT/SIGTERM/SIGHUP, testbed.host.interrupts notes and ignores every later one while the
    exception unwinds, so a teardown that began because of an interrupt is never cut short. A teardown that
    began for another reason (the bed ended, or failed) may meet the first signal itself: then `delete` runs
    again from the start (it is safe on a half-removed cluster) with later signals ignored, and the
    interrupt goes on afterwards. When another exception is `unwinding`, a failed `delete` is reported and
    that exception goes on, so the user sees why the bed ended."""
    try:
        cluster.delete()
    except KeyboardInterrupt:
        progress.note(f"test bed: interrupted while removing {cluster.backend} cluster {cluster.name}; finishing the removal first")
        cluster.delete()
        raise
    except Exception as exc:
        if not unwinding:
            raise
        progress.note(f"test bed: removing {cluster.backend} cluster {cluster.name} failed: {type(exc).__name__}: {exc}")
