"""`KubernetesAIConformance-1.NN.yaml`: the program's checklist for the cluster's minor, read from the tests'
own source tree (conformance-versions/, the layout CNCF's submissions use: metadata, then spec.<area> lists of
id, description, level, status, evidence, notes), with status, evidence and notes filled from this run.

Only status, evidence and notes are written (the program forbids changing id, description or level). A
requirement an AI-conformance test covers is judged by that test; one our own conformance suite covers (a
report of `dra-testbed conformance` given) takes our verdict; the rest stay blank: not assessed here.
Evidence links are relative `file://results/junit.xml#TestName`, the program's form for results kept beside
the checklist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import yaml

from testbed.aiconformance.events import FAIL, PASS, TestResult
from testbed.errors import EnvironmentProblem

TEMPLATES = Path("conformance-versions")
_TEMPLATE = re.compile(r"^KubernetesAIConformance-1\.(\d+)\.yaml$")
# checklist requirement -> the AI-conformance tests that judge it
REQUIREMENT_TESTS: dict[str, tuple[str, ...]] = {
    "secure_accelerator_access": ("TestSecureAcceleratorAccess",),
    "gang_scheduling": ("TestGangScheduling",),
}
IMPLEMENTED, NOT_IMPLEMENTED, NOT_APPLICABLE = "Implemented", "Not Implemented", "N/A"


class TemplateMissing(EnvironmentProblem):
    """The tests' source has no checklist for this minor or any before it."""


@dataclass
class Attribution:
    """Who a verdict is owed to, layer by layer: the driver under test, the node (kubelet, container runtime),
    and the stand-ins the run used."""

    driver: str
    node: str
    stand_ins: list[str] = field(default_factory=list)

    def line(self) -> str:
        parts = [f"DRA driver: {self.driver}", f"node: {self.node}"]
        if self.stand_ins:
            parts.append(f"stand-in images: {'; '.join(self.stand_ins)}")
        return "; ".join(parts)


def template_for(source: Path, minor: str) -> tuple[Path, str]:
    """The checklist of `minor` in the source tree, else the newest one before it; and its minor."""
    wanted = int(minor.split(".")[1])
    found = {int(m.group(1)): p for p in (source / TEMPLATES).glob("*.yaml") if (m := _TEMPLATE.match(p.name))}
    usable = [m for m in found if m <= wanted]
    if not usable:
        raise TemplateMissing(f"{source / TEMPLATES} has no KubernetesAIConformance-1.N.yaml for 1.{wanted} or before "
                              f"(has: {', '.join(f'1.{m}' for m in sorted(found)) or 'none'})")
    best = max(usable)
    return found[best], f"1.{best}"


def _judge(tests: tuple[str, ...], results: Mapping[str, TestResult], not_applicable: Mapping[str, str]) -> tuple[str, list[str], list[str]] | None:
    """Status, evidence links and notes of a requirement from its tests; None when none of them is in the binary."""
    ran = [results[t] for t in tests if t in results]
    skipped = [t for t in tests if t in not_applicable]
    if not ran and not skipped:
        return None
    evidence = [f"file://results/junit.xml#{r.name}" for r in ran] + ["file://results/e2e.log"] * bool(ran)
    notes = [f"{r.name}: {r.verdict or 'did not finish'}" for r in ran] + [f"{t}: not applicable ({not_applicable[t]})" for t in skipped]
    if not ran:
        return NOT_APPLICABLE, [f"file://results/junit.xml#{t}" for t in skipped], notes
    status = IMPLEMENTED if all(r.verdict == PASS for r in ran) else NOT_IMPLEMENTED
    return status, evidence, notes


def fill(template: dict, minor: str, results: Sequence[TestResult], not_applicable: Mapping[str, str],
         attribution: Attribution, metadata: Mapping[str, str], ours: Mapping[str, dict] | None = None,
         ours_link: str = "") -> dict:
    """The template with this run's verdicts: `results` (top-level and subtests), `ours` the requirements of our
    own conformance report by id (its PRODUCT.yaml's spec items), linked as `ours_link`."""
    top = {r.name: r for r in results if r.parent is None}
    filled = {**template, "metadata": {**template.get("metadata", {}), **metadata, "kubernetesVersion": f"v{minor}"}}
    filled["spec"] = {}
    for area, items in (template.get("spec") or {}).items():
        filled["spec"][area] = []
        for item in items:
            item = dict(item)
            judged = _judge(REQUIREMENT_TESTS.get(item["id"], ()), top, not_applicable)
            mine = (ours or {}).get(item["id"])
            notes: list[str] = []
            if judged:
                item["status"], item["evidence"], notes = judged[0], judged[1], judged[2]
                if item["status"] != NOT_APPLICABLE:  # a verdict is owed to the layers it ran on
                    notes.append(f"attribution: {attribution.line()}")
            if mine and mine.get("status"):
                item["evidence"] = [*item.get("evidence", []), f"{ours_link}#{item['id']}"]
                notes.append(f"dra-testbed conformance: {mine['status']}" + (f" ({mine['notes']})" if mine.get("notes") else ""))
                if not judged:
                    item["status"] = mine["status"]
                elif mine["status"] != item["status"]:
                    notes.append(f"the two disagree: {item['status']} by the AI-conformance tests, {mine['status']} by ours")
            if notes:
                item["notes"] = "; ".join(notes)
            elif not item.get("status"):
                item["notes"] = "not assessed by dra-testbed"
            filled["spec"][area].append(item)
    return filled


def read_ours(product_yaml: Path) -> dict[str, dict]:
    """Our conformance report's PRODUCT.yaml as requirement id -> item (status, notes, ...)."""
    data = yaml.safe_load(product_yaml.read_text()) or {}
    return {item["id"]: item for items in (data.get("spec") or {}).values() if isinstance(items, list)
            for item in items if isinstance(item, dict) and "id" in item}


def write_checklist(directory: Path, minor: str, template: Path, template_minor: str, content: dict) -> Path:
    """Write KubernetesAIConformance-<minor>.yaml into `directory`, saying which template it was filled from."""
    path = directory / f"KubernetesAIConformance-{minor}.yaml"
    origin = "" if template_minor == minor else (f"# No checklist for {minor} exists yet: this is {template.name}'s "
                                                 f"requirements, judged on a {minor} cluster.\n")
    path.write_text(f"# Filled by `dra-testbed ai-conformance` from {template.name} of kubernetes-sigs/ai-conformance.\n"
                    + origin + yaml.safe_dump(content, sort_keys=False, width=120, allow_unicode=True))
    return path
