"""Sessions: `nox -s e2e` (bring up the default test bed, run the e2e suites, tear it down) and `nox -s tests`.

$DRA_TESTBED_K8S picks the Kubernetes minor (default 1.34), $DRA_TESTBED_BACKEND the backend of `e2e` (kwok,
kind) and $DRA_TESTBED_DRIVER its driver (ours, nvidia: NVIDIA's plugin found as testbed/drivers/nvidia/binary.py
says, which builds it from its pinned commit when nothing else gives one); arguments after `--` go to pytest.
"""

from __future__ import annotations

import os
import sys

import nox

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # nox imports this file from outside the project
from hostenv.dirs import shared_inputs  # noqa: E402  (standard library only: nox's own Python can load it)

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

K8S = os.environ.get("DRA_TESTBED_K8S", "1.34")
BACKEND = os.environ.get("DRA_TESTBED_BACKEND", "kwok")
DRIVER = os.environ.get("DRA_TESTBED_DRIVER", "ours")
# On Ctrl-C nox waits `interrupt_timeout` seconds for its command (which got the same SIGINT) before it SIGTERMs
# it, then `terminate_timeout` before SIGKILL; its defaults (0.3 s, 0.2 s) killed pytest and `dra-testbed` in the
# middle of a bed's teardown. A bed-owning child's cleanup takes seconds to minutes (hostenv.processes.run_child
# waits up to 180 s for a CLI under pytest); a second Ctrl-C stops nox's wait, not the child's cleanup.
UNTIL_CLEANED = {"interrupt_timeout": 600.0, "terminate_timeout": 60.0}


def _prepare(session: nox.Session) -> None:
    """Install the project, then make sure the toolchain of the chosen minor is cached (built if need be)."""
    session.install("-e", ".[test]")
    session.run("dra-testbed", "toolchain", "ensure", "--k8s", K8S, **UNTIL_CLEANED)


@nox.session
def tests(session: nox.Session) -> None:
    """Every suite: unit, fake NVML, driver, and the live-cluster suites on a KWOK test bed."""
    _prepare(session)
    # the upstream DRA smoke (suites/upstream) needs e2e.test: built through the toolchain, cached per release
    session.run("dra-testbed", "upstream-e2e", "--build-only", "--k8s", K8S, **UNTIL_CLEANED)
    # NVIDIA's plugin found, or built with its progress in view, before pytest captures it; where there is none
    # the suites that run it fail, each with the lookup's line, and the rest still run
    _nvidia_plugin(session, required=False)
    # the AI-conformance tests built from source (git + module proxy) with progress in view; where the source cannot
    # be reached (no GitHub, no $DRA_TESTBED_AI_CONFORMANCE_REPO, nothing cached) the smoke is an allowed skip
    # (suites/skips.yaml), where it cannot be built it fails with the same line; the rest still runs
    session.run("dra-testbed", "ai-conformance", "--build-only", "--k8s", K8S, success_codes=[0, 1], **UNTIL_CLEANED)
    # the second minor's pool shape (a second cold toolchain) runs in `nox -s pool-shapes`; a -m in posargs wins
    # left out, each in a session of its own: the second minor's pool shape (`pool-shapes`: a second cold toolchain)
    # and what needs helm (`renderers`: minutes to build cold); a -m in posargs wins
    session.run("python", "-m", "pytest", "suites", "-q", "-ra", "--k8s", K8S, "-m", "not second_minor and not helm", "--durations=25",
                "--junitxml", "reports/tests/junit.xml", *session.posargs, **UNTIL_CLEANED)


@nox.session
def renderers(session: nox.Session) -> None:
    """`try --helm`: the tests marked `helm` that `nox -s tests` leaves out (helm built from its Go module on first
    use, minutes on 2 cores, cached afterwards); kustomize's tests run in `nox -s tests`."""
    _prepare(session)
    session.run("python", "-m", "pytest", "suites/outcomes", "-q", "-ra", "--k8s", K8S, "-m", "helm", *session.posargs, **UNTIL_CLEANED)


@nox.session(name="pool-shapes")
def pool_shapes(session: nox.Session) -> None:
    """The 1.35+ pool shape (counter sets in slices of their own): slice parity with NVIDIA's plugin and every
    board x mode on a live 1.35 API server, the tests marked `second_minor` that `nox -s tests` leaves out."""
    _prepare(session)
    _nvidia_plugin(session)
    session.run("python", "-m", "pytest", "suites/nvidia/test_slice_parity.py", "suites/driver/test_slice_shapes_live.py",
                "-q", "-ra", "--k8s", K8S, "-m", "second_minor",
                *session.posargs, **UNTIL_CLEANED)


@nox.session(name="sharing")
def sharing(session: nox.Session) -> None:
    """Shared GPUs past the default minor: slice parity with NVIDIA's plugin under consumable shares on 1.36, and
    the allocation machine on shared GPUs (a 1.35+ bed: 1.34.4's allocator misjudges shares), the tests of
    suites/nvidia/test_shares_parity.py, suites/properties/test_sharing_machine.py and test_upstream_shared_counters.py
    (the allocator's counters of a shared partitionable GPU, 1.35 and 1.36) marked `second_minor`; then shared
    claims prepared by real kubelets on kind with both drivers (suites/kind/test_kind_sharing.py, two kind beds)."""
    _prepare(session)
    _nvidia_plugin(session)
    session.run("python", "-m", "pytest", "suites/nvidia/test_shares_parity.py", "-q", "-ra", "--k8s", K8S, *session.posargs,
                env={"DRA_TESTBED_SHARES_PARITY": "full"}, **UNTIL_CLEANED)
    session.run("python", "-m", "pytest", "suites/properties/test_sharing_machine.py",
                "suites/properties/test_upstream_shared_counters.py", "-q", "-ra", "--k8s", K8S, "-m", "second_minor",
                *session.posargs, **UNTIL_CLEANED)
    session.run("python", "-m", "pytest", "suites/plugin/test_mps_daemon.py", "-q", "-ra", "--k8s", K8S, *session.posargs,
                env={"DRA_TESTBED_MPS_FAULTS": "full"}, **UNTIL_CLEANED)
    session.run("python", "-m", "pytest", "suites/kind/test_kind_sharing.py", "-q", "-ra", "--k8s", K8S, *session.posargs,
                env={"DRA_TESTBED_SHARING": "full"}, **UNTIL_CLEANED)


@nox.session
def e2e(session: nox.Session) -> None:
    """The main job: the default test bed (KWOK, mixed H100/B200) and the end-to-end suites against it; ends with
    a table of what was proved and writes reports/e2e/junit.xml and reports/e2e/report.html."""
    _prepare(session)
    if DRIVER == "nvidia":
        _nvidia_plugin(session)
    session.run("python", "-m", "pytest", "suites/e2e", "-q", "-ra", "--k8s", K8S, "--backend", BACKEND, "--driver", DRIVER,
                "-p", "testbed.pytest.proofs", "--junitxml", "reports/e2e/junit.xml", "--proof-report", "reports/e2e/report.html",
                "--proof-title", f"end-to-end on the default test bed ({BACKEND}, Kubernetes {K8S}, driver {DRIVER})",
                *session.posargs, **UNTIL_CLEANED)


def _nvidia_plugin(session: nox.Session, required: bool = True) -> None:
    """NVIDIA's plugin found (or built) before the tests by the lookup they use themselves, which prints the
    binary and where it came from; none found fails a session that `required` it, with the lookup's one line."""
    session.run("python", "-m", "testbed.drivers.nvidia.binary", success_codes=[0] if required else [0, 1], **UNTIL_CLEANED)


@nox.session(name="properties-nvidia")
def properties_nvidia(session: nox.Session) -> None:
    """The property machines on NVIDIA's own slices at the Hypothesis profile's settings (`nox -s tests` runs a
    smoke of them): suites/properties/test_nvidia_slices.py with $DRA_TESTBED_NVIDIA_PROPERTIES=full."""
    _prepare(session)
    _nvidia_plugin(session)
    session.run("python", "-m", "pytest", "suites/properties/test_nvidia_slices.py", "-q", "-ra", "--k8s", K8S, *session.posargs,
                env={"DRA_TESTBED_NVIDIA_PROPERTIES": "full"}, **UNTIL_CLEANED)


@nox.session
def health(session: nox.Session) -> None:
    """GPUs that fail, on 1.34 (effect None refused) and 1.36 (taken): NVIDIA's plugin with gate NVMLDeviceHealthCheck
    under every injection scenario (suites/nvidia/test_nvidia_health.py, $DRA_TESTBED_NVIDIA_HEALTH=full), then our
    driver's taints live and against NVIDIA's (suites/health), and both drivers' taints on kind workers
    (suites/kind/test_kind_health_taints.py). `nox -s tests` runs both on 1.34 with the smoke table."""
    _prepare(session)
    _nvidia_plugin(session)
    for minor in (K8S, "1.36"):
        session.run("dra-testbed", "toolchain", "ensure", "--k8s", minor, **UNTIL_CLEANED)
        session.run("python", "-m", "pytest", "suites/nvidia/test_nvidia_health.py", "suites/health", "suites/kind/test_kind_health_taints.py",
                    "suites/kind/test_kind_pod_health.py",
                    "-q", "-ra", "--k8s", minor,
                    *session.posargs, env={"DRA_TESTBED_NVIDIA_HEALTH": "full"}, **UNTIL_CLEANED)
    # the failing-GPU machine and its proofs (suites/health/test_health_machine.py), once: it runs on any minor
    session.run("python", "-m", "pytest", "suites/health/test_health_machine.py", "-q", "-ra", "--k8s", K8S,
                *session.posargs, env={"DRA_TESTBED_HEALTH_MACHINE": "full"}, **UNTIL_CLEANED)


@nox.session
def install(session: nox.Session) -> None:
    """`dra-testbed install` and `uninstall` of the chart into a live KWOK bed playing the user's cluster
    (suites/install with $DRA_TESTBED_INSTALL=full; `nox -s tests` renders, lints and checks the chart)
    and into a kind bed, where its KWOK controller and publisher run as pods (test_install_kind.py)."""
    _prepare(session)
    session.run("python", "-m", "pytest", "suites/install", "-q", "-ra", "--k8s", K8S, *session.posargs,
                env={"DRA_TESTBED_INSTALL": "full"}, **UNTIL_CLEANED)


@nox.session
def kueue(session: nox.Session) -> None:
    """Kueue built from its Go module (minutes cold, cached per version) and run as a host process against a KWOK
    bed of our driver: quota for one GPU by DeviceClass admits one Job and holds the second (suites/kueue with
    $DRA_TESTBED_KUEUE=full)."""
    _prepare(session)
    session.run("python", "-m", "pytest", "suites/kueue", "-q", "-ra", "--k8s", K8S, *session.posargs,
                env={"DRA_TESTBED_KUEUE": "full"}, **UNTIL_CLEANED)


@nox.session(name="claim-status")
def claim_status(session: nox.Session) -> None:
    """status.devices on live KWOK beds: our plugin's device status (suites/driver/test_device_status_live.py) and
    fabric-attached GPUs' binding conditions (suites/driver/test_fabric_attach_live.py), each with its fault-switch
    bed too ($DRA_TESTBED_DEVICE_STATUS_LIVE=full, $DRA_TESTBED_FABRIC_ATTACH_LIVE=full), on K8S and on 1.36, the first
    minor whose scheduler waits for binding conditions by default (a few minutes)."""
    _prepare(session)
    for minor in dict.fromkeys((K8S, "1.36")):
        session.run("python", "-m", "pytest", "suites/driver/test_device_status_live.py", "suites/driver/test_fabric_attach_live.py",
                    "-q", "-ra", "--k8s", minor, *session.posargs,
                    env={"DRA_TESTBED_DEVICE_STATUS_LIVE": "full", "DRA_TESTBED_FABRIC_ATTACH_LIVE": "full"}, **UNTIL_CLEANED)


@nox.session(name="plugin-host")
def plugin_host(session: nox.Session) -> None:
    """One plugin process for many simulated nodes: a live KWOK bed whose plugins run in a host
    (suites/e2e/test_plugin_host_live.py, $DRA_TESTBED_PLUGIN_HOST_LIVE=full), then the memory per simulated node,
    per-node processes against the host (benchmarks/plugin_memory.py; arguments after `--` go to it)."""
    _prepare(session)
    session.run("python", "-m", "pytest", "suites/e2e/test_plugin_host_live.py", "-q", "-ra", "--k8s", K8S,
                env={"DRA_TESTBED_PLUGIN_HOST_LIVE": "full"}, **UNTIL_CLEANED)
    session.run("python", "benchmarks/plugin_memory.py", *(session.posargs or ["--nodes", "10,50,200", "--per-node-max", "50"]),
                **UNTIL_CLEANED)


@nox.session
def evolution(session: nox.Session) -> None:
    """The generated hardware-evolution machine on KWOK at the Hypothesis profile's settings (`nox -s tests` runs
    its explicit example and the faults two rule families catch): suites/properties/test_evolution.py with
    $DRA_TESTBED_EVOLUTION=full (every family's fault), and the MIG machine under nvml-chooses-placement (test_physical_bites.py); pick a
    profile with `-- --hypothesis-profile nightly`."""
    _prepare(session)
    session.run("python", "-m", "pytest", "suites/properties/test_evolution.py", "suites/properties/test_physical_bites.py",
                "-q", "-ra", "--k8s", K8S, "-k", "machine or explicit or family",
                *session.posargs, env={"DRA_TESTBED_EVOLUTION": "full"}, **UNTIL_CLEANED)


@nox.session(name="nvidia-plugin")
def nvidia_plugin(session: nox.Session) -> None:
    """NVIDIA's gpu-kubelet-plugin built from its pinned commit (git: $DRA_TESTBED_NVIDIA_REPO or GitHub) into
    the cache; prints its path."""
    session.install("-e", ".")
    session.run("python", "-m", "testbed.drivers.nvidia.build", **UNTIL_CLEANED)


TRACE_DIR = os.environ.get("DRA_TESTBED_TRACE_DIR", str(shared_inputs() / "data" / "alibaba-gpu-v2023"))
TRACE_LISTS = ("openb_pod_list_default.csv", "openb_pod_list_gpushare100.csv", "openb_pod_list_multigpu50.csv")


@nox.session
def density(session: nox.Session) -> None:
    """The density table of the three Alibaba 2023 pod lists ($DRA_TESTBED_TRACE_DIR): whole, static and dynamic MIG,
    GPUs shared by memory and by 10 shares (on 1.35 or newer: 1.34.4's allocator misjudges shares)."""
    missing = [name for name in TRACE_LISTS if not os.path.isfile(os.path.join(TRACE_DIR, name))]
    if missing:
        session.error(f"no {missing[0]} in {TRACE_DIR}; set DRA_TESTBED_TRACE_DIR to the folder of the Alibaba 2023 GPU trace")
    _prepare(session)
    for name in TRACE_LISTS:
        session.run("dra-testbed", "density", "--trace", os.path.join(TRACE_DIR, name), "--fleet", "clusters/layouts/density-h100.yaml",
                    "--modes", "whole,static-mig:all-balanced,dynamic-mig,whole:shares=memory,whole:shares=10",
                    "--k8s", max(K8S, "1.35", key=lambda minor: tuple(map(int, minor.split(".")))),
                    "--report", os.path.join("density-report", name.removesuffix(".csv")), *session.posargs, **UNTIL_CLEANED)


@nox.session
def fuzz(session: nox.Session) -> None:
    """The long bad-input fuzz: 2,000 cases per target (`nox -s tests` runs 25); counts in reports/fuzz/."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "suites/robustness/test_fuzz_inputs.py", "-q", "-s", "-p", "no:cacheprovider",
                *session.posargs, env={"DRA_TESTBED_FUZZ_EXAMPLES": os.environ.get("DRA_TESTBED_FUZZ_EXAMPLES", "2000"),
                                       "DRA_TESTBED_FUZZ_RANDOM": "1"}, **UNTIL_CLEANED)


@nox.session
def conformance(session: nox.Session) -> None:
    """The conformance suite: the full fault matrix (KWOK, and the node-only checks on kind), then the
    suite's reports for our driver and for NVIDIA's (its plugin found as `nox -s e2e` finds it) on KWOK and kind.

    With arguments after `--`, runs `dra-testbed conformance` with them instead (e.g. `-- --kubeconfig
    FILE --driver-name gpu.nvidia.com --report DIR`)."""
    _prepare(session)
    if session.posargs:
        session.run("dra-testbed", "conformance", *session.posargs, **UNTIL_CLEANED)
        return
    _nvidia_plugin(session)  # before the long matrix: NVIDIA's reports are part of the session, never left out
    session.run("python", "-m", "pytest", "suites/conformance", "-q", "-ra", "--k8s", K8S,
                env={"DRA_TESTBED_CONFORMANCE_MATRIX": "full", "DRA_TESTBED_CONFORMANCE_OUT": "reports/conformance/matrix"}, **UNTIL_CLEANED)
    # the kind suite's own fault rows: the driver redeployed with a fault on its session bed
    session.run("python", "-m", "pytest", "suites/kind/test_kind_dra.py", "-q", "-ra", "--k8s", K8S, "-k", "test_fault_",
                env={"DRA_TESTBED_CONFORMANCE_MATRIX": "full"}, **UNTIL_CLEANED)
    # incomplete (3) on both: KWOK cannot run the node side, kind cannot add a node (slices.removed-with-node);
    # a failed MUST (1) still fails the session
    for backend in ("kwok", "kind"):
        session.run("dra-testbed", "conformance", "--backend", backend, "--k8s", K8S, "--driver", "ours",
                    "--report", f"reports/conformance/ours-{backend}", success_codes=[0, 3], **UNTIL_CLEANED)
    for backend in ("kwok", "kind"):  # NVIDIA's plugin, a test input: its reports, whatever the verdict
        session.run("dra-testbed", "conformance", "--backend", backend, "--k8s", K8S, "--driver", "nvidia",
                    "--report", f"reports/conformance/nvidia-{backend}", success_codes=[0, 1, 3], **UNTIL_CLEANED)


@nox.session
def campaign(session: nox.Session) -> None:
    """The long fault campaign (benchmarks/fault_campaign.py): 100 random kills of the plugin, publisher, scheduler,
    apiserver and etcd during generated workloads on KWOK, the same seeds with zero kills, then the faults it must
    catch; `nox -s tests` runs a dozen kills. Arguments after `--` go to the script (e.g. `-- --kills 20`)."""
    _prepare(session)
    session.run("python", "benchmarks/fault_campaign.py", "--k8s", K8S, "--report", "reports/campaign", *session.posargs, **UNTIL_CLEANED)


@nox.session
def fresh(session: nox.Session) -> None:
    """The README's test command, then its main command, unchanged in a throwaway Debian chroot (its own network
    namespace) with only Go, Python and gcc (root; an hour or more cold). `-- --keep` keeps the chroot,
    `-- --workdir DIR` places it, `-- --sessions tests` runs only the test command."""
    session.install("-e", ".")
    session.run("python", "-m", "testbed.fresh", *session.posargs, **UNTIL_CLEANED)


@nox.session
def upstream(session: nox.Session) -> None:
    """Kubernetes' own DRA e2e suite (test/e2e/dra): builds and caches e2e.test of the minor, runs the control-plane
    group on a KWOK bed and writes junit.xml and summary.json to reports/upstream/kwok-MINOR/. Arguments after `--`
    go to `dra-testbed upstream-e2e` instead (e.g. `-- --backend kind --k8s 1.35 --report DIR`: every DRA spec,
    [Serial], [Slow] and [Feature:OffByDefault] included, on kind with the alpha gates on)."""
    _prepare(session)
    args = session.posargs or ["--backend", "kwok", "--k8s", K8S, "--report", f"reports/upstream/kwok-{K8S}"]
    session.run("dra-testbed", "upstream-e2e", *args, **UNTIL_CLEANED)


@nox.session(name="parity-boards")
def parity_boards(session: nox.Session) -> None:
    """Slice parity with NVIDIA's plugin for every board of the catalog x mode on both pool shapes (1.34 and
    1.35+: a second control plane), and dynamic MIG on Ampere with MIG mode on and on nodes mixing MIG and
    non-MIG boards; `nox -s tests` and `pool-shapes` run a representative set of boards."""
    _prepare(session)
    _nvidia_plugin(session)
    session.run("python", "-m", "pytest", "suites/nvidia/test_slice_parity.py", "suites/nvidia/test_dynamic_mig_nodes.py",
                "-q", "-ra", "--k8s", K8S, "-m", "cluster", "--durations=10", *session.posargs,
                env={"DRA_TESTBED_PARITY_BOARDS": "all"}, **UNTIL_CLEANED)


@nox.session(name="ai-conformance")
def ai_conformance(session: nox.Session) -> None:
    """Kubernetes' AI-conformance tests (kubernetes-sigs/ai-conformance: git at its pinned commit, $DRA_TESTBED_AI_CONFORMANCE_REPO
    or GitHub) on a kind bed per row of suites/aiconformance: our driver, our driver under faults, NVIDIA's; `nox -s tests` runs
    the smoke on its session kind bed. With arguments after `--`, runs `dra-testbed ai-conformance` with them instead."""
    _prepare(session)
    if session.posargs:
        session.run("dra-testbed", "ai-conformance", "--k8s", K8S, *session.posargs, **UNTIL_CLEANED)
        return
    _nvidia_plugin(session)
    session.run("python", "-m", "pytest", "suites/aiconformance", "-q", "-ra", "--k8s", K8S, "-k", "bed_of_its_own",
                env={"DRA_TESTBED_AI_CONFORMANCE": "full"}, **UNTIL_CLEANED)


@nox.session
def features137(session: nox.Session) -> None:
    """Kubernetes 1.37 features on KWOK beds of our driver (suites/driver/test_gang_scheduling_live.py, about five
    minutes): gang scheduling of multi-node GPU jobs (whole and MIG) and a PodGroup's shared claim, a 1.36 bed
    refusing the v1beta1 PodGroup, compatibility groups keeping whole and MIG apart under counters-undeclared,
    list-type numaNode selected by includes(); `nox -s tests` runs the slice checks of test_compatibility_groups.py."""
    _prepare(session)
    for minor in ("1.36", "1.37"):
        session.run("dra-testbed", "toolchain", "ensure", "--k8s", minor, **UNTIL_CLEANED)
    session.run("python", "-m", "pytest", "suites/driver/test_gang_scheduling_live.py", "-q", "-ra", "--durations=10",
                *session.posargs, env={"DRA_TESTBED_FEATURES_137": "full"}, **UNTIL_CLEANED)
