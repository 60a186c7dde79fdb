"""Existing backend: a cluster someone else runs, given by a kubeconfig. It is never created or torn down."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kubernetes import client, config

from testbed.clusters.base import Cluster, ClusterError, ClusterSpec, ClusterStatus
from testbed.clusters.driver import DriverSpec

REQUIRED_API = "resource.k8s.io/v1"


class ExistingCluster(Cluster):
    """A cluster reached through a kubeconfig; `create` only checks that it serves DRA."""

    backend = "existing"

    def __init__(self, name: str = "existing", kubeconfig: str | Path | None = None) -> None:
        super().__init__(name)
        self._kubeconfig = Path(kubeconfig).expanduser() if kubeconfig else None

    def kubeconfig(self) -> Path:
        if self._kubeconfig is None or not self._kubeconfig.is_file():
            raise ClusterError(f"the existing backend needs a readable kubeconfig; got {self._kubeconfig}")
        return self._kubeconfig

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig()))

    def exists(self) -> bool:
        return self._kubeconfig is not None and self._kubeconfig.is_file()

    def create(self, spec: ClusterSpec, force: bool = False) -> Path:
        """Check the cluster answers and serves resource.k8s.io/v1; nothing is started."""
        status = self.status()
        if not status.running:
            raise ClusterError(f"cluster of {self.kubeconfig()} is not reachable: {status.detail}")
        api = self.api_client()
        try:
            groups = client.ApisApi(api).get_api_versions().groups
        finally:
            api.close()
        served = {v.group_version for g in groups for v in g.versions}
        if REQUIRED_API not in served:
            raise ClusterError(f"cluster of {self.kubeconfig()} does not serve {REQUIRED_API} (DRA); it serves "
                               f"{', '.join(sorted(v for v in served if v.startswith('resource.k8s.io'))) or 'no resource.k8s.io version'}")
        return self.kubeconfig()

    def delete(self) -> None:
        """Never tear down a cluster this project did not bring up."""

    def load_images(self, *references: str) -> None:
        raise ClusterError("dra-testbed loads images only into clusters it runs (kind); push them to a registry the existing cluster pulls from")

    def deploy_driver(self, driver: DriverSpec) -> None:
        raise ClusterError("dra-testbed deploys drivers only on clusters it runs (kwok, kind); an existing cluster keeps the driver it has")

    def export_logs(self, folder: Path | None = None) -> Path:
        """What the API shows (nodes, ResourceSlices, events of every namespace) as JSON: the node and
        component logs of a cluster someone else runs are theirs to collect."""
        folder = folder or Path.cwd() / f"existing-logs-{time.strftime('%Y%m%d-%H%M%S')}"
        folder.mkdir(parents=True, exist_ok=True)
        api = self.api_client()
        try:
            core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
            for name, listing in (("nodes", core.list_node), ("resourceslices", resource.list_resource_slice),
                                  ("events", core.list_event_for_all_namespaces)):
                (folder / f"{name}.json").write_text(json.dumps(api.sanitize_for_serialization(listing()), indent=1) + "\n")
        finally:
            api.close()
        return folder

    def status(self) -> ClusterStatus:
        try:
            version, nodes, slices = self.api_summary()
        except ClusterError as exc:
            return ClusterStatus(self.name, self.backend, False, self._kubeconfig, detail=str(exc))
        except Exception as exc:  # noqa: BLE001 - anything that stops us talking means "not running"
            return ClusterStatus(self.name, self.backend, False, self._kubeconfig, detail=f"{type(exc).__name__}: {exc}"[:200])
        return ClusterStatus(self.name, self.backend, True, self._kubeconfig, version, nodes, slices)
