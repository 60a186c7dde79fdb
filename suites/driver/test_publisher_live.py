"""The publisher keeps slices in line with Nodes and NVML state, and survives a restart."""

from __future__ import annotations

import pytest

from driver_helpers import IDENTITY
from fake_gpus.machine import launch
from fake_gpus.nvml import state
from testbed.clusters.kwok import KwokCluster, node_object
from testbed.clusters.layout import Mode, NodeSpec
from testbed.kube.waiting import wait_for

pytestmark = pytest.mark.cluster


def pool_devices(bed, node: str, generation: int | None = None):
    """Wait for a complete pool of `node` (at `generation` if given); returns its device names."""
    seen: dict[str, object] = {}

    def complete(s) -> bool:
        seen[s.metadata.name] = s
        members = [m for m in seen.values() if m.spec.pool.generation == s.spec.pool.generation]
        return (generation is None or s.spec.pool.generation == generation) and len(members) == s.spec.pool.resource_slice_count

    last = wait_for(bed.resource.list_resource_slice, complete, field_selector=f"spec.nodeName={node}",
                    what=f"a complete pool of {node}")
    return sorted(d.name for m in seen.values() if m.spec.pool.generation == last.spec.pool.generation for d in m.spec.devices or [])


def test_node_life_and_nvml_state_changes(scheduling_bed) -> None:
    bed = scheduling_bed
    node = NodeSpec("late-h200", "h200-141gb", 2, Mode("static-mig", "all-3g.71gb"))
    bed.core.create_node(body=node_object(node))
    try:
        devices = pool_devices(bed, node.name, generation=1)
        assert devices == ["gpu-0-mig-3g71gb-9-0", "gpu-0-mig-3g71gb-9-4", "gpu-1-mig-3g71gb-9-0", "gpu-1-mig-3g71gb-9-4"]
        # the node's MIG state changes behind the driver's back: one instance of GPU 1 goes
        state_dir = KwokCluster(bed.name).home / "nvml" / node.name
        _, mig = state.validate_state_dir(state_dir)
        gone = next(g for g in mig.gpu_instances if g.gpu == 1 and g.start == 4)
        mig.compute_instances = [c for c in mig.compute_instances if (c.gpu, c.gi) != (1, gone.id)]
        mig.gpu_instances = [g for g in mig.gpu_instances if g is not gone]
        state.write_mig_state(state_dir, mig)
        assert pool_devices(bed, node.name, generation=2) == devices[:3]
    finally:
        bed.core.delete_node(node.name)
    _wait_no_slices(bed, node.name)
    assert not bed.resource.list_resource_slice(field_selector=f"spec.nodeName={node.name}").items


def _wait_no_slices(bed, node: str) -> None:
    from testbed.kube.waiting import wait_gone

    for s in bed.resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items:
        wait_gone(bed.resource.read_resource_slice, s.metadata.name, what=f"slice {s.metadata.name} removed")


def test_restart_keeps_every_pool(scheduling_bed) -> None:
    """A restart with nothing changed rewrites nothing: same slices, generations and resourceVersions."""
    bed = scheduling_bed
    before = {n.name: pool_devices(bed, n.name) for n in bed.layout.nodes}
    versions = {s.metadata.name: (s.spec.pool.generation, s.metadata.resource_version) for s in bed.resource.list_resource_slice().items
                if s.spec.driver == IDENTITY.driver}
    home = KwokCluster(bed.name).home
    launch.stop_publisher(home)
    launch.start_publisher(home, bed.kubeconfig)  # returns after its first full sync
    after = {s.metadata.name: (s.spec.pool.generation, s.metadata.resource_version) for s in bed.resource.list_resource_slice().items
             if s.spec.driver == IDENTITY.driver}
    assert after == versions
    for node in bed.layout.nodes:
        assert pool_devices(bed, node.name) == before[node.name], node.name
