"""Paged slice lists (fake_gpus/driver/paging.py) go on past an etcd compaction half-way through, which a
big fleet's list on a loaded machine meets: with the large-fleet settings (no watch cache for slices) the
real apiserver refuses the old page token with 410."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from fake_gpus.driver import paging
from testbed.clusters.base import ClusterSpec
from testbed.clusters.kwok import KwokCluster
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.pytest.plugin import TestBed

pytestmark = pytest.mark.cluster


@pytest.fixture
def large_bed() -> Iterator[TestBed]:
    name = f"pg-{uuid.uuid4().hex[:8]}"
    cluster = KwokCluster(name)
    try:
        kubeconfig = cluster.create(ClusterSpec(name=name, allow_large=True,
                                                layout=Layout((NodeSpec("gpu-0", "h100-80gb", 4, Mode("dynamic-mig")),))))
        api = cluster.api_client()
        yield TestBed(name=name, kubeconfig=kubeconfig, api=api, layout=None, cluster=cluster)
        api.close()
    finally:
        cluster.delete()


def compact(bed, revision: str) -> None:
    """Compact the cluster's etcd at `revision` through etcd's own JSON gateway (what the apiserver does
    every 5 minutes)."""
    docs = yaml.safe_load_all((bed.cluster.kwok_dir / "kwok.yaml").read_text())
    options = next(d for d in docs if isinstance(d, dict) and d.get("kind") == "KwokctlConfiguration")["options"]
    request = urllib.request.Request(f"http://127.0.0.1:{options['etcdPort']}/v3/kv/compaction",
                                     data=json.dumps({"revision": revision, "physical": True}).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200


def test_a_list_continues_after_its_revision_is_compacted(large_bed: TestBed, monkeypatch: pytest.MonkeyPatch) -> None:
    bed = large_bed
    everything = {s.metadata.name for s in bed.resource.list_resource_slice().items}
    assert len(everything) > 2
    monkeypatch.setattr(paging, "PAGE", 1)
    first = bed.resource.list_resource_slice(limit=1)
    token, revision = first.metadata._continue, first.metadata.resource_version
    listing = paging.pages(bed.resource.list_resource_slice)
    seen = {next(listing)["metadata"]["name"]}  # the first page is read at `revision`
    bed.core.create_namespace({"metadata": {"generateName": "paging-"}})  # the revision moves on, then is compacted
    compact(bed, str(int(bed.core.list_namespace(limit=1).metadata.resource_version)))
    with pytest.raises(ApiException) as refused:  # the situation is real: the old token is refused
        bed.resource.list_resource_slice(limit=1, _continue=token)
    assert refused.value.status == 410, revision
    seen |= {s["metadata"]["name"] for s in listing}
    assert seen == everything
