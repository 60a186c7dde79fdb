"""The share-to-claim rule and the trace reader, on rows of the Alibaba trace slices in data/."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fake_gpus.driver.identity import current_identity
from testbed.density.mapping import claim_body, fleet_profiles, tiers
from testbed.density.trace import TraceError, TracePod, load_trace

DATA = Path(__file__).with_name("data")

# The rule, transcribed by hand from NVIDIA's H100 80GB MIG table (compute slices out of 7, least-memory
# profile of each size) rather than computed: (highest gpu_milli covered, profile).
H100_RULE = ((142, "1g.10gb"), (285, "2g.20gb"), (428, "3g.40gb"), (571, "4g.40gb"), (999, "7g.80gb"))
H100_UP = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def expected_first(milli: int, num_gpu: int) -> str:
    if milli == 1000 or num_gpu > 1:
        return "gpu"
    return next(profile for bound, profile in H100_RULE if milli <= bound)


def first_profile(claim: dict) -> str:
    first = claim["spec"]["devices"]["requests"][0]["firstAvailable"][0]
    if first["deviceClassName"] == "gpu.nvidia.com":
        return "gpu"
    return first["selectors"][0]["cel"]["expression"].split("['")[-1].rstrip("']")


def trace_rows() -> list[dict]:
    rows = []
    for file in sorted(DATA.glob("*.csv")):
        rows += [r for r in csv.DictReader(file.open()) if r["num_gpu"] != "0"]
    return rows


@pytest.mark.parametrize("row", trace_rows(), ids=lambda r: f"{r['name']}-{r['num_gpu']}x{r['gpu_milli']}")
def test_trace_row_maps_to_the_transcribed_profile(row: dict) -> None:
    pod = TracePod(0, row["name"], int(row["num_gpu"]), int(row["gpu_milli"]))
    claim = claim_body(pod, "c", fleet_profiles(["h100-80gb"]), current_identity())
    assert first_profile(claim) == expected_first(pod.gpu_milli, pod.num_gpu)
    subs = claim["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert all(s["count"] == pod.num_gpu for s in subs)


@pytest.mark.parametrize("milli", [1, 142, 143, 285, 286, 428, 429, 571, 572, 999])
def test_boundaries_and_fallbacks_go_up_to_a_whole_gpu(milli: int) -> None:
    steps = tiers(TracePod(0, "p", 1, milli), fleet_profiles(["h100-80gb"]))
    first = expected_first(milli, 1)
    assert [t.profiles[0] if t.profiles else "gpu" for t in steps] == list(H100_UP[H100_UP.index(first):]) + ["gpu"]


def test_whole_and_multi_gpu_pods_ask_for_gpus_then_full_mig() -> None:
    steps = tiers(TracePod(0, "p", 8, 1000), fleet_profiles(["h100-80gb", "h200-141gb"]))
    assert [(t.name, t.profiles) for t in steps] == [("gpu", ()), ("mig-7g", ("7g.141gb", "7g.80gb"))]


def test_four_slice_boards_offer_plain_profiles_and_their_whole_gpu_profile_as_full_mig() -> None:
    """RTX PRO 6000 (4 compute slices, -me/+gfx/+me.all variants) and A30: no variant is asked for, and the
    whole-GPU profile (4g) is the MIG fallback of a whole-GPU pod, as 7g is on an H100."""
    got = fleet_profiles(["rtx-pro-6000-96gb", "a30-24gb", "h100-80gb"])
    assert got == {1: ("1g.10gb", "1g.24gb", "1g.6gb"), 2: ("2g.12gb", "2g.20gb", "2g.48gb"), 3: ("3g.40gb",),
                   4: ("4g.24gb", "4g.40gb", "4g.96gb"), 7: ("4g.24gb", "4g.96gb", "7g.80gb")}


def test_timed_trace_events_and_what_is_left_out() -> None:
    trace = load_trace(DATA / "default-head60.csv")
    assert trace.timed and trace.cpu_only == 5 and len(trace.pods) == 55 and trace.with_gpu_spec == 0
    events = trace.events()
    assert [e.time for e in events] == sorted(e.time for e in events)
    assert sum(e.kind == "arrive" for e in events) == sum(e.kind == "depart" for e in events) == 55


def test_untimed_trace_keeps_a_window_of_pods_alive() -> None:
    trace = load_trace(DATA / "multigpu50-head40.csv")
    assert not trace.timed and len(trace.pods) == 38
    alive, peak = set(), 0
    for event in trace.events(window=5):
        (alive.add if event.kind == "arrive" else alive.remove)(event.pod.index)
        peak = max(peak, len(alive))
    assert peak == 5 and not alive


@pytest.mark.parametrize(("text", "message"), [
    ("name,num_gpu\na,1\n", "missing column 'gpu_milli'"),
    ("name,num_gpu,gpu_milli\na,1,x\n", "gpu_milli 'x' is not a whole number"),
    ("name,num_gpu,gpu_milli\na,2,500\n", "num_gpu 2 with gpu_milli 500"),
    ("name,num_gpu,gpu_milli,creation_time\na,1,500,3\n", "but not the other"),
    ("name,num_gpu,gpu_milli\na,0,0\n", "no GPU pods"),
])
def test_bad_traces_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "t.csv"
    file.write_text(text)
    with pytest.raises(TraceError, match=message) as info:
        load_trace(file)
    assert "\n" not in str(info.value)
