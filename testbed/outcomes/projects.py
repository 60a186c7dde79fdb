"""Which project serves an API group the bed does not: the one line a user gets for a custom resource
(a Kueue Workload, a JobSet, a RayJob) whose CustomResourceDefinition is neither on the bed nor in the input.
"""

from __future__ import annotations

# API group (or its parent domain) -> the project whose controller and CRDs serve it
PROJECTS = {
    "kueue.x-k8s.io": "Kueue",
    "jobset.x-k8s.io": "JobSet",
    "leaderworkerset.x-k8s.io": "LeaderWorkerSet",
    "scheduling.x-k8s.io": "the scheduler-plugins coscheduling plugin",
    "ray.io": "KubeRay",
    "kubeflow.org": "the Kubeflow Training Operator",
    "trainer.kubeflow.org": "Kubeflow Trainer",
    "scheduling.run.ai": "the KAI scheduler",
    "scheduling.volcano.sh": "Volcano",
    "batch.volcano.sh": "Volcano",
    "nvidia.com": "the NVIDIA GPU Operator",
    "resource.nvidia.com": "NVIDIA's DRA driver for GPUs (ComputeDomain)",
    "serving.kserve.io": "KServe",
    "monitoring.coreos.com": "the Prometheus Operator",
    "argoproj.io": "Argo",
}


def project_of(api_version: str) -> str | None:
    """The project serving `api_version`'s group (its own entry or its nearest parent domain's), or None."""
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    while group:
        if group in PROJECTS:
            return PROJECTS[group]
        group = group.partition(".")[2]
    return None


def not_served(kind: str, api_version: str) -> str:
    """Why the bed cannot take an object of this kind, and what would."""
    project = project_of(api_version)
    where = f"it comes from {project}, which the bed does not run" if project else "no CustomResourceDefinition for it is on the bed or in the input"
    return (f"this bed serves no {kind} in {api_version}: {where}; give the CRD in the input to check the object, "
            f"or try the Pods, Jobs or Deployments it would create")
