"""The check table is complete and consistent: every check bites under some fault, every fault exists."""

from __future__ import annotations

from fake_gpus.driver.faults import FAULTS
from testbed.conformance.checks import BY_ID, CHECKS, MUST, PROFILES, SHOULD, select
from testbed.conformance.faultmatrix import expected_failures, faults, runnable
from testbed.conformance.run import PROBES


def test_every_check_is_well_formed() -> None:
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    for c in CHECKS:
        assert c.level in (MUST, SHOULD), c.id
        assert c.requirement.endswith(".") and "\n" not in c.requirement, c.id
        assert c.sources and c.backends and c.profiles and set(c.profiles) <= set(PROFILES), c.id


def test_every_check_names_faults_that_exist_and_bite() -> None:
    for c in CHECKS:
        assert c.faults, f"{c.id} names no fault that proves it bites"
        assert set(c.faults) <= FAULTS.keys(), f"{c.id}: unknown faults {set(c.faults) - FAULTS.keys()}"


def test_every_check_has_a_probe() -> None:
    assert {c.id for c in CHECKS} == set(PROBES)


def test_the_kind_matrix_covers_every_node_only_check() -> None:
    node_only = {c.id for c in CHECKS if "kind" in c.backends and "kwok" not in c.backends}
    assert node_only and {c.id for c in runnable("kind")} == node_only
    assert {"cdi-all-devices", "checkpoint-lost", "admin-access-refused"} <= set(faults("kind"))
    for fault in faults("kind"):
        assert expected_failures(fault, "kind") == {c for c in node_only if fault in BY_ID[c].faults}


def test_matrix_comes_from_the_table() -> None:
    kwok = runnable("kwok")
    assert {f for c in kwok for f in c.faults} == set(faults("kwok"))
    for fault in faults("kwok"):
        assert expected_failures(fault) == {c.id for c in kwok if fault in c.faults}
    assert expected_failures("none") == set()


def test_profiles_select_subsets() -> None:
    everything = {c.id for c in select("all")}
    assert everything == {c.id for c in CHECKS}
    assert {c.id for p in PROFILES for c in select(p)} == everything
    assert "partitions.full-device-consumes-all" not in {c.id for c in select("gpu")}


def test_every_underdeclared_switch_has_its_board_partitionable_in_the_kwok_fleet() -> None:
    """A switch whose profile no dynamic-MIG GPU of the default KWOK fleet offers fails no check there."""
    from fake_gpus.catalog import get_board
    from fake_gpus.driver.faults import UNDERDECLARED
    from testbed.clusters.layout import load_layout
    from testbed.cli.conformance import DEFAULT_LAYOUT

    offered = {p.name for n in load_layout(DEFAULT_LAYOUT).nodes if n.mode.kind == "dynamic-mig"
               for p in get_board(n.board).gpu_instance_profiles}
    missing = {name: profile for name, (profile, _) in UNDERDECLARED.items() if profile not in offered}
    assert not missing, f"no partitionable GPU of {DEFAULT_LAYOUT.name} offers {missing}"
    for name in UNDERDECLARED:
        assert expected_failures(name) == {"partitions.within-counter-set", "sched.generated"}, name


def test_the_kwok_fleet_has_a_sharing_node_for_the_shares_checks() -> None:
    """The shares checks judge a node the layout promises to share; without one in the default KWOK fleet their
    switches would fail nothing there and their rows would break the matrix."""
    from testbed.clusters.layout import load_layout
    from testbed.cli.conformance import DEFAULT_LAYOUT

    sharing = [n for n in load_layout(DEFAULT_LAYOUT).nodes if n.mode.shares]
    assert sharing and all(n.mode.kind == "whole" for n in sharing)
    # "memory": a claim that asks no capacity takes the whole device, so the other checks' workloads see it whole
    assert {n.mode.shares for n in sharing} == {"memory"}
    only_shares = {"shares.published", "sched.shared-capacity", "node.time-slicing"}
    assert only_shares <= {c.id for c in select("shares")} and not only_shares & {c.id for c in select("gpu")}
    for fault in ("shares-not-multiple", "shares-exceed-device", "shares-step-not-divisor"):
        assert expected_failures(fault) == {"slices.served-api", "slices.stable-restart", "shares.published", "sched.shared-capacity"}
    assert expected_failures("sharing-ignored") == {"node.time-slicing"}
