"""Hypothesis strategies for claims that ask capacity of shared GPUs (consumable capacity, NVIDIA's consumable
shares): memory and `shares` amounts drawn near what the boards have, so requests round, fit, crowd a GPU and
overflow it.

They take the keyword arguments the machines pass every pod and claim strategy (`boards`, `identity`, ...) and
ignore the rest, so they compose with `strategies.pod_specs` in one machine.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fake_gpus.driver.consumable_shares import SHARES_CAPACITY
from fake_gpus.driver.identity import DriverIdentity, current_identity
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.strategies import _boards


def _memory_amounts(boards: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Quantities of memory: round and odd (rounding to the policy's step), halves, thirds, all, and one MiB more."""
    sizes = sorted({b.memory_mib for b in _boards(boards)})
    near = [f"{mib}Mi" for size in sizes for mib in (size // 3, size // 2, size, size + 1)]
    return st.sampled_from(["1Gi", "4Gi", "10Gi", "20Gi", "40Gi", "1500Mi", "4097Mi"] + near) | st.integers(1, 200 * 1024).map(lambda m: f"{m}Mi")


@st.composite
def capacity_sub_requests(draw, name: str, *, identity: DriverIdentity | None = None, boards: tuple[str, ...] = (),
                          max_shares: int = 8, **_ignored) -> SubRequest:
    """One whole GPU of the GPU class asking memory, shares, both or neither (then the policy's default)."""
    identity = identity or current_identity()
    capacity = []
    if draw(st.integers(0, 3)):  # mostly memory: the capacity every shareable device has
        capacity.append(("memory", draw(_memory_amounts(boards))))
    if draw(st.integers(0, 2)) == 0:  # a device without a `shares` capacity cannot serve these
        capacity.append((SHARES_CAPACITY, str(draw(st.integers(1, max_shares)))))
    return SubRequest(name, identity.gpu_class, capacity=tuple(sorted(capacity)))


@st.composite
def capacity_claim_specs(draw, **kwargs) -> ClaimSpec:
    """One request of one shared GPU, or firstAvailable of 2..3 capacity alternatives (big first falls back)."""
    if draw(st.integers(0, 3)) == 0:
        alternatives = tuple(draw(capacity_sub_requests(f"s{i}", **kwargs)) for i in range(draw(st.integers(2, 3))))
        return ClaimSpec((Request("r0", alternatives, first_available=True),))
    return ClaimSpec((Request("r0", (draw(capacity_sub_requests("r0", **kwargs)),)),))


@st.composite
def capacity_pod_specs(draw, name: str, shared: tuple[str, ...] = (), **kwargs) -> PodSpec:
    """A pod of one capacity claim (its own template) and the given standalone claims, used by its one container."""
    claims = (PodClaim("t0", template=draw(capacity_claim_specs(**kwargs))),)
    claims += tuple(PodClaim(f"s{i}", shared=s) for i, s in enumerate(shared))
    return PodSpec(name, claims, (tuple(c.name for c in claims),))
