"""Hypothesis strategies for DRA workloads: layouts, selectors, claims, pods, and step sequences.

Values are drawn near the catalog's real facts (product names, memory sizes, MIG profiles, driver
versions) so that selectors both hit and miss; names are short DNS labels so shrunk examples read well.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from fake_gpus.catalog import BOARD_KEYS, all_boards, get_board
from fake_gpus.driver.identity import DriverIdentity, current_identity, semver
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.workloads.model import ClaimSpec, MatchAttribute, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.selectors import AllOf, AnyOf, MemoryCompare, Not, StringIs, VersionCompare

COMPARISONS = ("<", "<=", "==", "!=", ">=", ">")
MAX_FIRST_AVAILABLE = 8  # resource.k8s.io/v1 limit of subrequests
# attributes a matchAttribute constraint may name: shared by many devices, per device, or per board
CONSTRAINT_ATTRIBUTES = ("productName", "architecture", "driverVersion", "uuid", "resource.kubernetes.io/pcieRoot")


# --- layouts -----------------------------------------------------------------------------------------


@st.composite
def layouts(draw, boards: tuple[str, ...] = BOARD_KEYS, modes: tuple[str, ...] = ("whole",),
            max_nodes: int = 3, max_count: int = 4) -> Layout:
    """Small clusters: 1..max_nodes nodes, each with 1..max_count GPUs of one board in one mode."""
    count = draw(st.integers(1, max_nodes))
    nodes = []
    for index in range(count):
        board = draw(st.sampled_from(boards))
        mode = draw(st.sampled_from(modes))
        nodes.append(NodeSpec(f"n{index}-{board.split('-')[0]}", board, draw(st.integers(1, max_count)), Mode(mode)))
    return Layout(tuple(nodes), name="hypothesis")


# --- selectors ---------------------------------------------------------------------------------------


def _boards(boards: tuple[str, ...]):
    return [get_board(k) for k in boards] if boards else list(all_boards())


def gpu_atoms(boards: tuple[str, ...] = ()) -> st.SearchStrategy:
    """Single predicates over whole-GPU facts."""
    known = _boards(boards)
    products = sorted({b.product_name for b in known}) + ["NVIDIA A100-SXM4-80GB"]
    architectures = sorted({b.dra_architecture for b in known}) + ["Ampere"]
    memories = sorted({b.memory_mib for b in known})
    versions = sorted({semver(b.driver_version) for b in known}) + ["570.133.20", "590.0.0"]
    return st.one_of(
        st.builds(StringIs, st.just("productName"), st.sampled_from(products), st.sampled_from(("==", "!="))),
        st.builds(StringIs, st.just("architecture"), st.sampled_from(architectures), st.sampled_from(("==", "!="))),
        st.builds(MemoryCompare, st.sampled_from(COMPARISONS),
                  st.sampled_from(memories) | st.integers(40 * 1024, 200 * 1024)),
        st.builds(VersionCompare, st.just("driverVersion"), st.sampled_from(COMPARISONS), st.sampled_from(versions)),
    )


def mig_atoms(boards: tuple[str, ...] = ()) -> st.SearchStrategy:
    """Single predicates over MIG-device facts (profile names and sizes of the catalog)."""
    known = _boards(boards)
    profiles = sorted({p.name for b in known for p in b.gpu_instance_profiles})
    sizes = sorted({p.memory_mib for b in known for p in b.gpu_instance_profiles if p.memory_mib})
    return st.one_of(
        st.builds(StringIs, st.just("profile"), st.sampled_from(profiles), st.sampled_from(("==", "!="))),
        st.builds(MemoryCompare, st.sampled_from(COMPARISONS), st.sampled_from(sizes)),
        st.builds(StringIs, st.just("productName"), st.sampled_from(sorted({b.product_name for b in known}))),
    )


def selectors(atoms: st.SearchStrategy) -> st.SearchStrategy:
    """An atom, or a small boolean combination of atoms."""
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: AllOf(tuple(xs))),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: AnyOf(tuple(xs))),
            inner.map(Not),
        ),
        max_leaves=3,
    )


# --- claims ------------------------------------------------------------------------------------------


@st.composite
def sub_requests(draw, name: str, *, identity: DriverIdentity | None = None, boards: tuple[str, ...] = (),
                 mig: bool = True, mig_percent: int = 17, admin: bool = False, max_count: int = 3) -> SubRequest:
    identity = identity or current_identity()
    use_mig = mig and draw(st.integers(0, 99)) < mig_percent
    device_class = identity.mig_class if use_mig else identity.gpu_class
    atoms = mig_atoms(boards) if use_mig else gpu_atoms(boards)
    # mostly zero or one selector and one device, so that a handful of pods fit and then contend
    chosen = tuple(draw(selectors(atoms)) for _ in range(draw(st.sampled_from((0, 1, 1, 2)))))
    all_devices = draw(st.integers(0, 9)) == 0
    count = 1 if all_devices else min(max_count, draw(st.sampled_from((1, 1, 1, 2, 2, 3))))
    return SubRequest(name, device_class, chosen, all_devices, count, admin and draw(st.integers(0, 5)) == 0)


@st.composite
def requests(draw, name: str, all_in_fallback: bool = True, **kwargs) -> Request:
    """`exactly` (maybe with adminAccess), or `firstAvailable` with 2..8 alternatives.

    `all_in_fallback=False` keeps allocationMode All out of alternatives after the first (a known
    allocator bug of 1.34/1.35, see testbed.workloads.upstream).
    """
    if draw(st.booleans()):
        alternatives = draw(st.integers(2, MAX_FIRST_AVAILABLE))
        subs = tuple(draw(sub_requests(f"s{i}", **dict(kwargs, admin=False))) for i in range(alternatives))
        if not all_in_fallback:
            subs = subs[:1] + tuple(replace(s, all_devices=False) for s in subs[1:])
        return Request(name, subs, first_available=True)
    return Request(name, (draw(sub_requests(name, **kwargs)),))


@st.composite
def claim_specs(draw, max_requests: int = 2, **kwargs) -> ClaimSpec:
    """1..max_requests requests, maybe matchAttribute constraints and opaque driver config."""
    identity = kwargs.get("identity") or current_identity()
    count = draw(st.integers(1, max_requests))
    reqs = tuple(draw(requests(f"r{i}", **kwargs)) for i in range(count))
    names = [r.name for r in reqs]
    constraints = tuple(
        MatchAttribute(attribute if "/" in attribute else f"{identity.driver}/{attribute}",
                       tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))))
        for attribute in draw(st.lists(st.sampled_from(CONSTRAINT_ATTRIBUTES), unique=True, max_size=1))
    )
    config = tuple(
        (tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))),
         {"apiVersion": f"resource.{identity.domain}/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": strategy}})
        for strategy in draw(st.lists(st.sampled_from(("TimeSlicing", "MPS")), unique=True, max_size=1))
    )
    return ClaimSpec(reqs, constraints, config)


@st.composite
def pod_specs(draw, name: str, shared: tuple[str, ...] = (), **kwargs) -> PodSpec:
    """1..2 template claims plus the given shared claims, used by 1..3 containers."""
    templates = draw(st.integers(0 if shared else 1, 2))
    claims = tuple(PodClaim(f"t{i}", template=draw(claim_specs(**kwargs))) for i in range(templates))
    claims += tuple(PodClaim(f"s{i}", shared=s) for i, s in enumerate(shared))
    names = [c.name for c in claims]
    containers = tuple(tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names))))
                       for _ in range(draw(st.integers(1, 3))))
    return PodSpec(name, claims, containers)


@st.composite
def churn_claim_specs(draw, boards: tuple[str, ...] = (), mig_percent: int = 50, identity: DriverIdentity | None = None,
                      **_ignored) -> ClaimSpec:
    """One exact request that mostly fits: 1..2 whole GPUs, or one MIG device of a profile the boards offer.

    For long churn (the fault campaign): devices are allocated, prepared and released all the time,
    where `claim_specs` mostly probes selectors that miss."""
    identity = identity or current_identity()
    if draw(st.integers(0, 99)) < mig_percent:
        profiles = sorted({p.name for b in _boards(boards) for p in b.gpu_instance_profiles})
        sub = SubRequest("r0", identity.mig_class, (StringIs("profile", draw(st.sampled_from(profiles))),))
    else:
        sub = SubRequest("r0", identity.gpu_class, count=draw(st.sampled_from((1, 1, 2))))
    return ClaimSpec((Request("r0", (sub,)),))


@st.composite
def churn_pod_specs(draw, name: str, shared: tuple[str, ...] = (), **kwargs) -> PodSpec:
    """A pod of one churn claim, or of the given shared claims, used by its one container."""
    claims = tuple(PodClaim(f"s{i}", shared=s) for i, s in enumerate(shared)) or (PodClaim("t0", template=draw(churn_claim_specs(**kwargs))),)
    return PodSpec(name, claims, (tuple(c.name for c in claims),))


@st.composite
def arrivals_and_departures(draw, max_steps: int = 6, **kwargs) -> list[tuple[str, object]]:
    """A plain sequence of steps (for replay-style tests without the state machine)."""
    steps, live, made = [], [], 0
    for _ in range(draw(st.integers(1, max_steps))):
        if live and draw(st.integers(0, 2)) == 0:
            victim = draw(st.sampled_from(live))
            live.remove(victim)
            steps.append(("depart", victim))
        else:
            name = f"p{made}"
            made += 1
            live.append(name)
            steps.append(("arrive", draw(pod_specs(name, **kwargs))))
    return steps


# --- partitions (dynamic MIG) ------------------------------------------------------------------------


def partition_choices(board_key: str) -> list[str | None]:
    """The board's MIG profiles whose facts are all known (the driver offers only those), and None for
    the full GPU."""
    return [p.name for p in get_board(board_key).gpu_instance_profiles if p.complete] + [None]


def partition_request(identity: DriverIdentity, name: str, profile: str | None) -> SubRequest:
    """A request for one partition of `profile` (None: the full GPU)."""
    if profile is None:
        return SubRequest(name, identity.gpu_class)
    return SubRequest(name, identity.mig_class, (StringIs("profile", profile),))


@st.composite
def partition_pods(draw, name: str, board_key: str, node: str, identity: DriverIdentity | None = None) -> PodSpec:
    """A pod pinned to `node` asking for one partition (a profile or the full GPU), or for the first
    available of 2..4 of them (big-first lists exercise fallback as partitions fill up)."""
    identity = identity or current_identity()
    choices = partition_choices(board_key)
    if draw(st.booleans()):
        request = Request("r0", (partition_request(identity, "r0", draw(st.sampled_from(choices))),))
    else:
        picks = draw(st.lists(st.sampled_from(choices), min_size=2, max_size=4, unique=True))
        request = Request("r0", tuple(partition_request(identity, f"s{i}", p) for i, p in enumerate(picks)), first_available=True)
    return PodSpec(name, (PodClaim("t0", template=ClaimSpec((request,))),), node=node)
