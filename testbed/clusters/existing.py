"""Existing backend: a cluster someone else runs, given by a kubeconfig. It is never created or torn down."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

from testbed.clusters.base import Cluster, ClusterError, ClusterSpec, ClusterStatus
from testbed.clusters.driver import DriverSpec
from testbed.clusters.fleet_labels import FLEET_LAYOUT_KEY, FLEET_LAYOUT_LABEL, FLEET_RELEASE_LABEL
from testbed.clusters.layout import Layout, load_layout
from testbed.errors import BadInputError

REQUIRED_API = "resource.k8s.io/v1"


class FleetLookupError(BadInputError):
    """No fleet of the chart, or more than one, where one layout was wanted; the message is one line."""


class NoFleetInstalled(FleetLookupError):
    """The cluster holds no layout ConfigMap of the chart."""


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

    def installed_layout(self) -> Layout:
        """The layout of the one fleet `dra-testbed install` (the Helm chart) put into this cluster, read from
        its layout ConfigMap; NoFleetInstalled where there is none, FleetLookupError where there are several."""
        api = self.api_client()
        try:
            maps = client.CoreV1Api(api).list_config_map_for_all_namespaces(label_selector=FLEET_LAYOUT_LABEL).items
        finally:
            api.close()
        if not maps:
            raise NoFleetInstalled(f"the cluster of {self.kubeconfig()} holds no fake GPU fleet of the chart (no ConfigMap labelled "
                                   f"{FLEET_LAYOUT_LABEL}); install one with `dra-testbed install` or give --layout")
        if len(maps) > 1:
            found = ", ".join(sorted(f"{(m.metadata.labels or {}).get(FLEET_RELEASE_LABEL)!r} ({m.metadata.namespace}/{m.metadata.name})" for m in maps))
            raise FleetLookupError(f"the cluster of {self.kubeconfig()} holds {len(maps)} fake GPU fleets of the chart, releases {found}; "
                                   f"give --layout to say which nodes to test")
        return _layout_of(maps[0])

    def layout_or_installed(self, layout: Layout | None) -> Layout | None:
        """`layout` when given, else the installed fleet's; None where the cluster holds no fleet of the chart
        (real GPU nodes: the checks read the nodes' labels), FleetLookupError where it holds several."""
        if layout is not None:
            return layout
        try:
            return self.installed_layout()
        except NoFleetInstalled:
            return None

    def status(self) -> ClusterStatus:
        try:
            version, nodes, slices = self.api_summary()
        except ClusterError as exc:
            return ClusterStatus(self.name, self.backend, False, self._kubeconfig, detail=str(exc))
        except Exception as exc:  # noqa: BLE001 - anything that stops us talking means "not running"
            return ClusterStatus(self.name, self.backend, False, self._kubeconfig, detail=f"{type(exc).__name__}: {exc}"[:200])
        return ClusterStatus(self.name, self.backend, True, self._kubeconfig, version, nodes, slices)


def _layout_of(config_map: client.V1ConfigMap) -> Layout:
    """The layout a fleet's ConfigMap holds, parsed as a layout file; a file named after the ConfigMap, so a
    LayoutError names where the text came from."""
    where = f"{config_map.metadata.namespace}-{config_map.metadata.name}"
    with tempfile.TemporaryDirectory(prefix="dra-testbed-fleet-") as folder:
        file = Path(folder) / f"{where}.yaml"
        file.write_text((config_map.data or {}).get(FLEET_LAYOUT_KEY, ""))
        return load_layout(file)
