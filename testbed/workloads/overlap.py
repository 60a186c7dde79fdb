"""Overlap sweep: every partition of a GPU paired with the finest partition on that GPU, early and once.

A driver that under-declares what one MIG profile consumes (a memory slice of its placement left out of
consumesCounters) lets the scheduler put another partition on that slice: a physical overlap the truth
check sees. Random churn reaches a given profile on a given board only by luck (eight choices per board),
so the ci profile missed such drivers. The sweep pairs, on each partitionable GPU, every choice P (each
profile and the full GPU, in a drawn order) with a drawn one-slice profile Q in one claim [P, Q] on an
empty GPU: P takes its first placement, Q the first slice P leaves free, which is any slice P omits from
its placement's prefix. One claim per choice, released before the next: two steps per choice.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import DriverIdentity, current_identity
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request
from testbed.workloads.runner import Runner
from testbed.workloads.strategies import partition_choices, partition_request

Probe = tuple[str, str | None, str]  # node, P (None: the full GPU), Q (a one-slice profile)


def finest_profiles(board_key: str) -> list[str]:
    """The board's complete profiles of one memory slice: partners that can land on any slice."""
    return [p.name for p in get_board(board_key).gpu_instance_profiles if p.complete and p.memory_slices == 1]


@st.composite
def overlap_sweep_cases(draw, nodes: dict[str, str]) -> list[Probe]:
    """Every (node, P) once, nodes and choices in drawn orders, each with a drawn partner Q."""
    probes: list[Probe] = []
    for node in draw(st.permutations(sorted(nodes))):
        board = nodes[node]
        partners = finest_profiles(board)
        if not partners:
            continue
        for choice in draw(st.permutations(partition_choices(board))):
            probes.append((node, choice, draw(st.sampled_from(partners))))
    return probes


def probe_pod(name: str, probe: Probe, identity: DriverIdentity) -> PodSpec:
    """A pod pinned to the probe's node holding one claim of two requests: P, then Q."""
    node, choice, partner = probe
    claim = ClaimSpec((Request("p", (partition_request(identity, "p", choice),)),
                       Request("q", (partition_request(identity, "q", partner),))))
    return PodSpec(name, (PodClaim("t0", template=claim),), node=node)


def overlap_sweep(api, layout_yaml: str, bundle: Path, probes: list[Probe], context: dict | None = None,
                  identity: DriverIdentity | None = None) -> dict:
    """Each probe arrives (soundness and the physical truth checked) and leaves before the next."""
    identity = identity or current_identity()
    runner = Runner(api, layout_yaml, bundle_dir=bundle, context=dict(context or {}), identity=identity).open()
    try:
        for index, probe in enumerate(probes):
            name = f"pair{index}"
            runner.arrive(probe_pod(name, probe, identity))
            runner.depart(name)
        return runner.stats
    finally:
        runner.close()


def sweep_examples(profile_examples: int) -> int:
    """Sweeps per run: one covers every pair, so a profile's example count (12 in ci) buys one per dozen."""
    return max(1, profile_examples // 12)
