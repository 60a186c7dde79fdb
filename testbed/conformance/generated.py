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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.stateful import run_state_machine_as_test

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import DriverIdentity
from testbed.conformance.node_watch import NodeWatch
from testbed.conformance.outcome import CheckFailed, Evidence
from testbed.conformance.subject import Subject
from testbed.workloads.bundle import layout_from_nodes, layout_yaml
from testbed.workloads.corpus import VRAM_CASES
from testbed.workloads.machine import allocation_machine
from testbed.workloads.overlap import overlap_sweep, overlap_sweep_cases
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.runner import PropertyFailure, Runner
from testbed.workloads.selectors import MemoryCompare, Not, StringIs
from testbed.workloads.steps import Arrive, Depart, Step
from testbed.workloads.strategies import churn_claim_specs, churn_pod_specs
from testbed.workloads.scenarios import memory_selector, memory_selector_cases, partition_churn, partition_churn_cases, partitionable_nodes
from testbed.workloads.devices import Inventory
from testbed.workloads.truth import board_of

BUDGET_ENV = "DRA_TESTBED_CONFORMANCE_EXAMPLES"
SEED = "derandomized (Hypothesis derandomize=True, no database)"
NODE_STEPS = 8  # steps per example of node.generated: pods run there, so steps cost seconds each


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


@contextmanager
def _findings(evidence: Evidence, ran: list[str]) -> Iterator[None]:
    """A property failure inside becomes CheckFailed naming what ran, its violations and bundle as evidence."""
    try:
        yield
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


def _generated(subject: Subject, evidence: Evidence, identity: DriverIdentity, budget: Budget, layout: str,
               bundles: Path) -> None:
    stats: dict[str, int] = {}
    ran: list[str] = []
    try:
        _api_side(subject, identity, budget, layout, bundles, stats, ran, evidence)
    finally:
        evidence.write("runs.json", {"ran": ran, "stats": stats, "seed": SEED, "budget": budget.__dict__})


def _api_side(subject: Subject, identity: DriverIdentity, budget: Budget, layout: str, bundles: Path, stats: dict[str, int],
              ran: list[str], evidence: Evidence) -> None:
    with _findings(evidence, ran):
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
            # Explicit examples, as Hypothesis' explicit phase runs them: the theme corpus's VRAM boundaries, all
            # whole GPUs of at least 80/94/141/180 GiB, each board marketed as N GB being a little under N GiB. A
            # driver publishing more memory than NVML reports gets a board its real size leaves out; the generated
            # cases above find that only when a drawn threshold falls between the two, and the machine's draws
            # follow the scheduler's choices, so without these a run could miss it (seen once in three matrix runs).
            for vram in VRAM_CASES:
                memory_selector(subject.api, layout, bundles / "vram", vram.case, identity.gpu_class, identity=identity)
                ran.append(f"all GPUs of at least {vram.gib} GiB")

        # Explicit examples too: "a GPU but not a <board>" by each string attribute of NVIDIA's the generator
        # draws from, on a node of only that board (the model: pending).
        # A driver that misnames the attribute gets the claim the excluded board there (its published device
        # lacks the attribute), which the board's real facts refute; random machine steps rarely draw this.
        for node, selector in _exclusions(inventory):
            memory_selector(subject.api, layout, bundles / "exclusions", (selector, False), identity.gpu_class,
                            identity=identity, node=node)
            ran.append(f"on {node}: {selector.part.attribute} != {selector.part.value!r}")


def node_generated(subject: Subject, evidence: Evidence) -> None:
    """The arrivals-and-departures machine on real kubelets, the node side judged after every step (node_watch):
    first an explicit opening per GPU node (one device of its mode; on the whole-GPU node an admin-access claim
    on all its GPUs beside it; every pod departs), then generated examples of claims that mostly fit (the fault
    campaign's churn: whole GPUs or MIG devices of the layout's boards), so that pods run and partitions are
    made and unmade on the nodes."""
    identity = DriverIdentity(subject.driver)
    budget = Budget.from_env()
    layout = layout_yaml(subject.layout) if subject.layout else layout_yaml(layout_from_nodes(subject.core))
    watch = NodeWatch(subject, evidence, sorted(partitionable_nodes(subject.api)))
    fields = {"image": subject.workload_image, "args": ("--sleep",), "grace": 1, "node_check": watch}
    stats: dict[str, int] = {}
    ran: list[str] = []
    with tempfile.TemporaryDirectory(prefix="conformance-bundle-") as scratch:
        try:
            watch.start()
            with _findings(evidence, ran):
                runner = Runner(subject.api, layout, bundle_dir=Path(scratch) / "opening", identity=identity, **fields).open()
                ran.append("opening on " + ", ".join(n.name for n in (subject.layout.nodes if subject.layout else ()) if n.count))
                try:
                    runner.run_steps(opening(subject))
                finally:
                    runner.close()
                # claims that mostly fit, half of them MIG devices of the layout's boards: pods run, partitions come and go
                boards = tuple(sorted({n.board for n in subject.layout.nodes})) if subject.layout else ()
                machine = allocation_machine(subject.api, layout, Path(scratch) / "machine", boards=boards, mig_percent=50,
                                             stats=stats, identity=identity, runner_fields=fields,
                                             pod_strategy=churn_pod_specs, claim_strategy=churn_claim_specs)
                ran.append(f"churn machine x{budget.machine} ({NODE_STEPS} steps)")
                run_state_machine_as_test(machine, settings=_settings(budget.machine, NODE_STEPS))
        finally:
            watch.close()
            evidence.write("runs.json", {"ran": ran, "stats": stats, "seed": SEED, "budget": budget.__dict__})
            evidence.write("node-side.json", watch.summary())


def opening(subject: Subject) -> list[Step]:
    """Per GPU node of the layout, a pod holding one device of the node's mode (whole: a GPU; MIG: the board's
    smallest MIG device; dynamic MIG: two such pods); beside the whole-GPU node's, a pod with admin access to
    all its GPUs; then every pod departs. Each fault of the node side shows here whatever the generator draws later."""
    steps: list[Step] = []
    pods: list[str] = []
    gpu = StringIs("type", "gpu")
    for node in subject.layout.nodes if subject.layout else ():
        if not node.count:
            continue
        if node.mode.kind == "whole":
            one = SubRequest("gpu", subject.gpu_class, (gpu,))
            every = SubRequest("gpu", subject.gpu_class, (gpu,), all_devices=True, admin_access=True)
            claims = [(f"open-{node.name}", one), (f"open-{node.name}-admin", every)]
        else:
            smallest = min(p.memory_mib for p in get_board(node.board).gpu_instance_profiles)
            smallest_mig = SubRequest("mig", subject.mig_class, (StringIs("type", "mig"), MemoryCompare("<=", smallest)))
            # dynamic MIG: two at once, so the node holds two instances made for two claims
            claims = [(f"open-{node.name}-{i}", smallest_mig) for i in range(2 if node.mode.kind == "dynamic-mig" else 1)]
        for name, request in claims:
            template = ClaimSpec((Request(request.name, (request,)),))
            steps.append(Arrive(PodSpec(name, (PodClaim("c", template=template),), node=node.name)))
            pods.append(name)
    return steps + [Depart(name) for name in pods]
