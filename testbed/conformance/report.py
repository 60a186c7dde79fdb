"""The report directory: results.json, junit.xml, e2e.log, PRODUCT.yaml (CNCF AI conformance shape), report.html."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import yaml

from testbed.conformance.checks import BY_ID, MUST, SHOULD
from testbed.conformance.outcome import ERROR, FAIL, NOT_RUN, PASS, Outcome
from testbed.conformance.verdict import verdict

EVIDENCE_FILES = ("results.json", "junit.xml", "e2e.log", "report.html")


@dataclass
class RunInfo:
    """What was tested with what: versions, the driver's identity and digest, seeds, the command."""

    driver: str
    backend: str
    profile: str
    kubernetes: str
    driver_artifact: str = "dra-testbed's own driver (fake_gpus/driver)"
    driver_digest: str = ""
    suite_version: str = ""
    seeds: dict = field(default_factory=dict)
    command: str = ""
    started: str = ""
    faults: str = ""  # fault switches of our driver, when any were on


def results(outcomes: Sequence[Outcome], info: RunInfo) -> dict:
    return {"verdict": verdict(outcomes), "run": info.__dict__, "checks": [o.as_dict() for o in outcomes],
            "counts": {v: sum(o.verdict == v for o in outcomes) for v in (PASS, FAIL, ERROR, NOT_RUN)}}


def junit(outcomes: Sequence[Outcome], info: RunInfo) -> str:
    suite = ET.Element("testsuite", name=f"dra-conformance {info.driver}", tests=str(len(outcomes)),
                       failures=str(sum(o.verdict == FAIL for o in outcomes)), errors=str(sum(o.verdict == ERROR for o in outcomes)),
                       skipped=str(sum(o.verdict == NOT_RUN for o in outcomes)), time=f"{sum(o.duration for o in outcomes):.3f}")
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=f"conformance.{o.level}", name=o.id, time=f"{o.duration:.3f}")
        if o.verdict == FAIL:
            ET.SubElement(case, "failure", message=o.message).text = "\n".join(o.evidence)
        elif o.verdict == ERROR:
            ET.SubElement(case, "error", message=o.message).text = "\n".join(o.evidence)
        elif o.verdict == NOT_RUN:
            ET.SubElement(case, "skipped", message=o.message)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def _status(outcomes: Sequence[Outcome]) -> str:
    """CNCF's vocabulary: Implemented, Partially Implemented, Not Implemented, N/A."""
    if not outcomes or all(o.verdict == NOT_RUN for o in outcomes):
        return "N/A"
    if all(o.verdict == PASS for o in outcomes):
        return "Implemented"
    if any(o.verdict == PASS for o in outcomes):
        return "Partially Implemented"
    return "Not Implemented"


def product(outcomes: Sequence[Outcome], info: RunInfo) -> dict:
    """PRODUCT.yaml as CNCF AI conformance lays it out (metadata, spec.<area>[id, description, level, status,
    evidence, notes]), with the driver's checks as their own area and the DRA-related CNCF requirements
    summarised from them."""
    by_prefix = lambda *prefixes: [o for o in outcomes if o.id.startswith(prefixes)]  # noqa: E731
    evidence = list(EVIDENCE_FILES)

    def summary(id_: str, description: str, level: str, members: list[Outcome]) -> dict:
        failing = [o.id for o in members if o.verdict in (FAIL, ERROR)]
        unrun = [o.id for o in members if o.verdict == NOT_RUN]
        notes = "; ".join(filter(None, [f"failing: {', '.join(failing)}" if failing else "",
                                        f"not run: {', '.join(unrun)}" if unrun else ""]))
        return {"id": id_, "description": description, "level": level, "status": _status(members),
                "evidence": evidence, "notes": notes or f"checks: {', '.join(o.id for o in members)}"}

    checks = [{"id": o.id, "description": o.requirement or BY_ID[o.id].requirement, "level": o.level,
               "status": {PASS: "Implemented", FAIL: "Not Implemented", ERROR: "Not Implemented", NOT_RUN: "N/A"}[o.verdict],
               "evidence": o.evidence + ["results.json"], "notes": o.message} for o in outcomes]
    return {
        "metadata": {"kubernetesVersion": info.kubernetes, "platformName": f"DRA driver {info.driver}",
                     "platformVersion": info.driver_digest or info.driver_artifact, "vendorName": "",
                     "description": f"dra-testbed conformance run ({info.backend}, profile {info.profile}): verdict {verdict(outcomes)}",
                     "driverArtifact": info.driver_artifact, "driverDigest": info.driver_digest,
                     "suiteVersion": info.suite_version, "seeds": info.seeds, "command": info.command},
        "spec": {
            "accelerators": [
                summary("dra_support", "Support Dynamic Resource Allocation (DRA) APIs to enable more flexible and fine-grained resource requests beyond simple counts.",
                        MUST, [o for o in outcomes if o.level == MUST]),
                summary("gpu_sharing", "Hardware partitions (MIG) and shared devices exposed as schedulable DRA devices.", SHOULD,
                        by_prefix("partitions.", "names.mig-profiles", "sched.partitions", "sched.match-attribute", "shares.",
                                  "sched.shared-capacity", "node.time-slicing")),
            ],
            "security": [summary("secure_accelerator_access", "Containers see exactly the accelerators DRA allocated to them.", MUST,
                                 by_prefix("node.container-sees-its-devices", "node.shared-claim"))],
            "draDriver": checks,
        },
    }


def write_report(directory: Path, outcomes: Sequence[Outcome], info: RunInfo, log_lines: Sequence[str]) -> dict:
    """Write every report file into `directory`; returns results.json's content."""
    from testbed.conformance.html import render_html

    directory.mkdir(parents=True, exist_ok=True)
    data = results(outcomes, info)
    (directory / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    (directory / "junit.xml").write_text(junit(outcomes, info))
    (directory / "e2e.log").write_text("\n".join(log_lines) + "\n")
    (directory / "PRODUCT.yaml").write_text(yaml.safe_dump(product(outcomes, info), sort_keys=False, width=120))
    (directory / "report.html").write_text(render_html(directory, outcomes, info))
    return data
