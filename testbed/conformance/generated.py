"""Generated workloads on the driver's own slices, checked step by step against the reference model.

The arrivals-and-departures machine of suites/properties (testbed/workloads/machine.py) runs on the
subject's cluster, then partition churn and one overlap sweep (testbed/workloads/overlap.py) on its
partitionable GPUs and memory selectors on its whole GPUs. Every allocation is checked against the oracle over the published slices and against the
products' real facts (testbed/workloads/truth.py). Hypothesis runs derandomized with no example
database, so a run is repeatable and its seed is recorded in the report.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.stateful import run_state_machine_as_test

from fake_gpus.driver.identity import DriverIdentity
from testbed.conformance.outcome import CheckFailed, Evidence
from testbed.conformance.subject import Subject
from testbed.workloads.bundle import layout_from_nodes, layout_yaml
from testbed.workloads.machine import allocation_machine
from testbed.workloads.overlap import overlap_sweep, overlap_sweep_cases
from testbed.workloads.runner import PropertyFailure
from testbed.workloads.selectors import Not, StringIs
from testbed.workloads.scenarios import memory_selector, memory_selector_cases, partition_churn, partition_churn_cases, partitionable_nodes
from testbed.workloads.devices import Inventory
from testbed.workloads.truth import board_of

BUDGET_ENV = "DRA_TESTBED_CONFORMANCE_EXAMPLES"


@dataclass(frozen=True)
class Budget:
    """Examples per property; the default keeps the check near a minute on 2 cores."""

    machine: int = 3
    steps: int = 5
    churn: int = 6
    memory: int = 4

    @classmethod
    def from_env(cls) -> Budget:
        scale = int(os.environ.get(BUDGET_ENV, "1") or 1)
        return cls(3 * scale, 5, 6 * scale, 4 * scale)


def _settings(examples: int, steps: int | None = None) -> settings:
    extra = {"stateful_step_count": steps} if steps else {}
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None, print_blob=False,
                    phases=(Phase.explicit, Phase.generate), **extra,  # no shrinking: the failure is the finding
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


def _exclusions(inventory: Inventory) -> list[tuple[str, Not]]:
    """Per board, a node whose whole GPUs are all that board and "not productName / architecture ==" the
    board's (as the catalog names them): on that node nothing matches unless the attribute is misnamed."""
    boards: dict[str, dict] = {}  # node -> {board key: board}
    for d in inventory.devices.values():
        if d.attribute("type") == "gpu" and d.node:
            board = board_of(d)
            boards.setdefault(d.node, {})[board.key if board else None] = board
    by_board = {}
    for node in sorted(boards):
        (key, board), *others = boards[node].items()
        if not others and board is not None:
            by_board.setdefault(key, (node, board))
    return [(node, Not(StringIs(attribute, value))) for node, b in by_board.values()
            for attribute, value in (("productName", b.product_name), ("architecture", b.dra_architecture))]


def _finding(exc: BaseException) -> PropertyFailure | AssertionError | None:
    """The first property failure (else assertion) in `exc`, looking inside exception groups: Hypothesis
    raises a group when one run finds several distinct failures."""
    if isinstance(exc, BaseExceptionGroup):
        found = [f for e in exc.exceptions if (f := _finding(e)) is not None]
        return next((f for f in found if isinstance(f, PropertyFailure)), found[0] if found else None)
    return exc if isinstance(exc, (PropertyFailure, AssertionError)) else None


def generated(subject: Subject, evidence: Evidence) -> None:
    identity = DriverIdentity(subject.driver)
    budget = Budget.from_env()
    layout = layout_yaml(subject.layout) if subject.layout else layout_yaml(layout_from_nodes(subject.core))
    with tempfile.TemporaryDirectory(prefix="conformance-bundle-") as scratch:  # a finding's files go to evidence
        _generated(subject, evidence, identity, budget, layout, Path(scratch))


def _generated(subject: Subject, evidence: Evidence, identity: DriverIdentity, budget: Budget, layout: str,
               bundles: Path) -> None:
    stats: dict[str, int] = {}
    ran: list[str] = []
    try:
        machine = allocation_machine(subject.api, layout, bundles / "machine", stats=stats, identity=identity)
        ran.append(f"machine x{budget.machine} ({budget.steps} steps)")
        run_state_machine_as_test(machine, settings=_settings(budget.machine, budget.steps))

        nodes = partitionable_nodes(subject.api)
        if nodes:
            @_settings(budget.churn)
            @given(case=partition_churn_cases(nodes))
            def churn(case):
                partition_churn(subject.api, layout, bundles / "churn", case, identity=identity)
            ran.append(f"partition churn x{budget.churn} on {sorted(nodes)}")
            churn()

            @_settings(1)
            @given(probes=overlap_sweep_cases(nodes))
            def sweep(probes):  # every partition beside a one-slice partition: finds an under-declared profile
                overlap_sweep(subject.api, layout, bundles / "sweep", probes, identity=identity)
            ran.append(f"overlap sweep on {sorted(nodes)}")
            sweep()

        inventory = Inventory.from_slices(subject.slices())
        memories = sorted({b.memory_mib for d in inventory.devices.values()
                           if d.attribute("type") == "gpu" and not d.consumes and (b := board_of(d))})
        if memories:
            @_settings(budget.memory)
            @given(case=memory_selector_cases(memories))
            def memory(case):
                memory_selector(subject.api, layout, bundles / "memory", case, identity.gpu_class, identity=identity)
            ran.append(f"memory selectors x{budget.memory} over {memories} MiB")
            memory()

        # Explicit examples, as Hypothesis' explicit phase runs them: "a GPU but not a <board>" by each string
        # attribute of NVIDIA's the generator draws from, on a node of only that board (the model: pending).
        # A driver that misnames the attribute gets the claim the excluded board there (its published device
        # lacks the attribute), which the board's real facts refute; random machine steps rarely draw this.
        for node, selector in _exclusions(inventory):
            memory_selector(subject.api, layout, bundles / "exclusions", (selector, False), identity.gpu_class,
                            identity=identity, node=node)
            ran.append(f"on {node}: {selector.part.attribute} != {selector.part.value!r}")
    except Exception as exc:  # noqa: BLE001 - a finding, or several (Hypothesis groups distinct failures), or a bug
        found = _finding(exc)
        if found is None:
            raise
        if not isinstance(found, PropertyFailure):  # an assertion, e.g. DeviceClasses the model cannot stand for
            raise CheckFailed(f"after {', '.join(ran)}: {str(found).splitlines()[0]}") from None
        evidence.write("violations.txt", str(found))
        bundle = found.bundle
        if bundle and Path(bundle).is_dir():
            for f in sorted(Path(bundle).iterdir()):
                if f.is_file():
                    evidence.write(f"bundle/{f.name}", f.read_text())
        first = found.violations[0] if found.violations else None
        raise CheckFailed(f"after {', '.join(ran)}: [{first.property}] {first.message}" if first else str(found)) from None
    finally:
        evidence.write("runs.json", {"ran": ran, "stats": stats, "seed": "derandomized (Hypothesis derandomize=True, no database)",
                                     "budget": budget.__dict__})
