"""What the property machines run with, for the suites and the benchmarks alike: Hypothesis profiles (`ci`,
`dev`, `nightly`, chosen by $DRA_TESTBED_HYPOTHESIS_PROFILE, registered and loaded on import; the example database
in $DRA_TESTBED_HYPOTHESIS_DB) and the fleets the machines contend on."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from testbed.clusters.layout import Layout, Mode, NodeSpec

PROFILE_ENV = "DRA_TESTBED_HYPOTHESIS_PROFILE"
DB_ENV = "DRA_TESTBED_HYPOTHESIS_DB"

_common = dict(
    deadline=None,  # a step waits on a real scheduler; wall-clock deadlines would only measure the machine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
                           HealthCheck.filter_too_much],
    print_blob=True,
)
if os.environ.get(DB_ENV):
    _common["database"] = DirectoryBasedExampleDatabase(os.environ[DB_ENV])

# ci keeps the whole properties suite within ~5 minutes on a 2-core machine
settings.register_profile("ci", max_examples=12, stateful_step_count=6, **_common)
settings.register_profile("dev", max_examples=4, stateful_step_count=4, **_common)
settings.register_profile("nightly", max_examples=150, stateful_step_count=12, **_common)
settings.load_profile(os.environ.get(PROFILE_ENV, "ci"))

# Whole GPUs of three boards, few enough that a handful of pods contend for them.
WHOLE_LAYOUT = Layout((
    NodeSpec("h100-0", "h100-80gb", 2, Mode("whole")),
    NodeSpec("h200-0", "h200-141gb", 2, Mode("whole")),
    NodeSpec("b200-0", "b200-180gb", 2, Mode("whole")),
), name="properties-whole")

# Partitionable (dynamic MIG) GPUs of two boards and a static MIG layout: counters and repartitioning.
DYNAMIC_LAYOUT = Layout((
    NodeSpec("dyn-h100", "h100-80gb", 1, Mode("dynamic-mig")),
    NodeSpec("dyn-h200", "h200-141gb", 1, Mode("dynamic-mig")),
    NodeSpec("static-h100", "h100-80gb", 1, Mode("static-mig", "all-balanced")),
), name="properties-dynamic")
# What the fault-bite tests bring up once per fault: one partitionable H100.
FAULT_LAYOUT = Layout((NodeSpec("dyn-h100", "h100-80gb", 1, Mode("dynamic-mig")),), name="properties-fault")
# Whole GPUs that claims share (consumable capacity): shares of 4 on two H100s, memory shares on one H200.
SHARED_LAYOUT = Layout((
    NodeSpec("share-h100", "h100-80gb", 2, Mode("whole", shares="4")),
    NodeSpec("mem-h200", "h200-141gb", 1, Mode("whole", shares="memory")),
), name="properties-shared")
# Dynamic MIG with 4 shares per device: the full GPU and its MIG devices all shareable (a claim asking nothing takes
# one share and no memory, so claims crowd a device), consuming one counter set per GPU
SHARED_MIG_LAYOUT = Layout((
    NodeSpec("share-dyn-h100", "h100-80gb", 2, Mode("dynamic-mig", shares="4")),
), name="properties-shared-mig")
