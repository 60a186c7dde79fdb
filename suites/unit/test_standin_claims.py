"""Which claims of a pod the stand-in kubelet (KWOK beds) prepares, as the kubelet's DRA manager finds them
(resourceclaim.Name): a template's claim is named in the pod's status, and a status entry without a name
means the pod runs without that claim (upstream e2e: "runs a pod without a generated resource claim")."""

from __future__ import annotations

import pytest
from kubernetes import client

from testbed.kubelet.standin import PrepareError, StandInKubelet, claim_names, holds_claims


def _pod(statuses: list[client.V1PodResourceClaimStatus] | None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="tester-1", namespace="dra-1", uid="u1"),
        spec=client.V1PodSpec(containers=[], resource_claims=[client.V1PodResourceClaim(name="my-inline-claim",
                                                                                      resource_claim_template_name="tester-1")]),
        status=client.V1PodStatus(resource_claim_statuses=statuses))


def _kubelet(tmp_path) -> StandInKubelet:
    return StandInKubelet(node="h100-1", driver="gpu.example.com", registry_dir=tmp_path)


def test_a_status_entry_without_a_claim_name_needs_nothing_prepared(tmp_path) -> None:
    # no API call may be made for it: the api client points nowhere
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    pod = _pod([client.V1PodResourceClaimStatus(name="my-inline-claim", resource_claim_name=None)])
    assert _kubelet(tmp_path).claims_of(api, pod) == []


def test_a_template_claim_not_generated_yet_is_an_error(tmp_path) -> None:
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    with pytest.raises(PrepareError, match="has no ResourceClaim yet"):
        _kubelet(tmp_path).claims_of(api, _pod(None))


def test_the_schedulers_claim_for_extended_resources_comes_last() -> None:
    """DRAExtendedResource: a pod asking `nvidia.com/gpu: 1` gets a claim named in status.extendedResourceClaimStatus,
    which the kubelet prepares after the pod's own claims; a pod holding only that claim holds claims."""
    extended = client.V1PodExtendedResourceClaimStatus(resource_claim_name="tester-1-extended-resources-x7k2p", request_mappings=[])
    pod = _pod([client.V1PodResourceClaimStatus(name="my-inline-claim", resource_claim_name="tester-1-my-inline-claim-abcde")])
    pod.status.extended_resource_claim_status = extended
    assert claim_names(pod) == ["tester-1-my-inline-claim-abcde", "tester-1-extended-resources-x7k2p"]
    pod.spec.resource_claims = None
    assert claim_names(pod) == ["tester-1-extended-resources-x7k2p"] and holds_claims(pod)
    pod.status.extended_resource_claim_status = None
    assert claim_names(pod) == [] and not holds_claims(pod)
