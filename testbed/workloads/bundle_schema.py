"""The shape of a replay bundle's steps.json and context.json, checked before any cluster starts.

A bundle is usually written by a failing property, but people edit them (shrink further by hand, change
a count): every problem is one line naming the place (`step 3 pod.claims[0].template.requests[0]...`),
what is wrong and what is valid.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from testbed.errors import BadInputError
from testbed.workloads.selectors import OPS

OPERATORS = tuple(OPS)
STEP_OPS = ("shared", "arrive", "depart", "released", "add-node", "replace-node", "switch-mode", "roll-driver")
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


class BundleError(BadInputError):
    """A bundle file that cannot be replayed; one line for the user."""


def _fail(where: str, problem: str, valid: str) -> BundleError:
    return BundleError(f"{where}: {problem}; valid: {valid}")


def _type(value: Any, kind: type | tuple[type, ...], where: str, valid: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise _fail(where, f"is {type(value).__name__} {_short(value)}", valid)
    return value


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _keys(data: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    _type(data, dict, where, f"an object with keys {', '.join(required + optional)}")
    for key in required:
        if key not in data:
            raise _fail(where, f"has no {key!r}", f"an object with keys {', '.join(required + optional)}")
    extra = sorted(set(data) - set(required) - set(optional))
    if extra:
        raise _fail(where, f"has unknown key {extra[0]!r}", ", ".join(required + optional))
    return data


def _name(value: Any, where: str) -> str:
    _type(value, str, where, "a DNS label (lower-case letters, digits, '-')")
    if not _DNS.match(value) or len(value) > 63:
        raise _fail(where, f"{value!r} is not a DNS label", "lower-case letters, digits, '-', at most 63")
    return value


def _list(value: Any, where: str, what: str, empty: bool = True) -> list:
    _type(value, list, where, f"a list of {what}")
    if not empty and not value:
        raise _fail(where, "is empty", f"a non-empty list of {what}")
    return value


def _selector(data: Any, where: str) -> None:
    kinds = ("driverIs", "string", "memory", "version", "allOf", "anyOf", "not")
    _type(data, dict, where, f"a selector object with one of {', '.join(kinds)}")
    kind = next((k for k in kinds if k in data), None)
    if kind is None:
        raise _fail(where, f"is no selector ({sorted(data)[:3]})", f"an object with one of {', '.join(kinds)}")
    if kind == "driverIs":
        _keys(data, where, ("driverIs",))
        _type(data["driverIs"], str, f"{where}.driverIs", "a driver name")
    elif kind in ("string", "version"):
        _keys(data, where, (kind, "op", "value"))
        _type(data[kind], str, f"{where}.{kind}", "an attribute name")
        if data["op"] not in OPERATORS:
            raise _fail(f"{where}.op", f"{_short(data['op'])} is unknown", ", ".join(OPERATORS))
        _type(data["value"], str, f"{where}.value", "a string")
        if kind == "version" and not _VERSION.match(data["value"]):
            raise _fail(f"{where}.value", f"{data['value']!r} is not a semantic version", "e.g. 570.0.0")
    elif kind == "memory":
        _keys(data, where, ("memory", "mib"))
        if data["memory"] not in OPERATORS:
            raise _fail(f"{where}.memory", f"{_short(data['memory'])} is unknown", ", ".join(OPERATORS))
        _type(data["mib"], int, f"{where}.mib", "a whole number of MiB")
    elif kind in ("allOf", "anyOf"):
        _keys(data, where, (kind,))
        for i, part in enumerate(_list(data[kind], f"{where}.{kind}", "selectors", empty=False)):
            _selector(part, f"{where}.{kind}[{i}]")
    else:
        _keys(data, where, ("not",))
        _selector(data["not"], f"{where}.not")


def _subrequest(data: Any, where: str) -> None:
    _keys(data, where, ("name", "class", "selectors", "all", "count", "adminAccess"), ("capacity",))
    _name(data["name"], f"{where}.name")
    _type(data["class"], str, f"{where}.class", "a DeviceClass name")
    for i, sel in enumerate(_list(data["selectors"], f"{where}.selectors", "selectors")):
        _selector(sel, f"{where}.selectors[{i}]")
    _type(data["all"], bool, f"{where}.all", "true or false")
    _type(data["count"], int, f"{where}.count", "a whole number >= 1")
    if data["count"] < 1:
        raise _fail(f"{where}.count", f"{data['count']} is below 1", "a whole number >= 1")
    _type(data["adminAccess"], bool, f"{where}.adminAccess", "true or false")
    for name, amount in _type(data.get("capacity", {}), dict, f"{where}.capacity", "an object of capacity name to quantity").items():
        _type(amount, str, f"{where}.capacity.{name}", "a quantity such as 4Gi")
        try:
            parse_quantity(amount)
        except ValueError:
            raise _fail(f"{where}.capacity.{name}", f"{amount!r} is not a quantity", "a quantity such as 4Gi") from None


def _claim(data: Any, where: str) -> None:
    _keys(data, where, ("requests", "constraints", "config"))
    for i, req in enumerate(_list(data["requests"], f"{where}.requests", "requests", empty=False)):
        rw = f"{where}.requests[{i}]"
        _keys(req, rw, ("name", "firstAvailable", "alternatives"))
        _name(req["name"], f"{rw}.name")
        _type(req["firstAvailable"], bool, f"{rw}.firstAvailable", "true or false")
        alternatives = _list(req["alternatives"], f"{rw}.alternatives", "subrequests", empty=False)
        if not req["firstAvailable"] and len(alternatives) != 1:
            raise _fail(f"{rw}.alternatives", f"has {len(alternatives)} entries", "exactly one unless firstAvailable")
        for j, alt in enumerate(alternatives):
            _subrequest(alt, f"{rw}.alternatives[{j}]")
    for i, c in enumerate(_list(data["constraints"], f"{where}.constraints", "matchAttribute constraints")):
        _keys(c, f"{where}.constraints[{i}]", ("attribute", "requests"))
        _type(c["attribute"], str, f"{where}.constraints[{i}].attribute", "a qualified attribute name")
        for j, r in enumerate(_list(c["requests"], f"{where}.constraints[{i}].requests", "request names")):
            _type(r, str, f"{where}.constraints[{i}].requests[{j}]", "a request name")
    for i, c in enumerate(_list(data["config"], f"{where}.config", "opaque configs")):
        _keys(c, f"{where}.config[{i}]", ("requests", "parameters"))
        for j, r in enumerate(_list(c["requests"], f"{where}.config[{i}].requests", "request names")):
            _type(r, str, f"{where}.config[{i}].requests[{j}]", "a request name")
        _type(c["parameters"], dict, f"{where}.config[{i}].parameters", "an object")


def _pod(data: Any, where: str) -> None:
    _keys(data, where, ("name", "claims", "containers"), ("node",))
    _name(data["name"], f"{where}.name")
    if data.get("node") is not None:
        _name(data["node"], f"{where}.node")
    names = []
    for i, claim in enumerate(_list(data["claims"], f"{where}.claims", "pod claims")):
        cw = f"{where}.claims[{i}]"
        _keys(claim, cw, ("name", "template", "shared"))
        names.append(_name(claim["name"], f"{cw}.name"))
        if (claim["template"] is None) == (claim["shared"] is None):
            raise _fail(cw, "needs exactly one of template and shared", "a template object or a shared claim name")
        if claim["template"] is not None:
            _claim(claim["template"], f"{cw}.template")
        else:
            _name(claim["shared"], f"{cw}.shared")
    for i, container in enumerate(_list(data["containers"], f"{where}.containers", "lists of claim names")):
        for j, used in enumerate(_list(container, f"{where}.containers[{i}]", "claim names")):
            if used not in names:
                raise _fail(f"{where}.containers[{i}][{j}]", f"{_short(used)} is no claim of the pod", ", ".join(names) or "none")


def check_steps(steps: Any, where: str = "steps.json") -> list[dict]:
    """Every step of a bundle well-formed, or BundleError naming the first problem."""
    for index, step in enumerate(_list(steps, where, "steps")):
        at = f"{where} step {index + 1}"
        _type(step, dict, at, f"an object with 'op' (one of {', '.join(STEP_OPS)})")
        op = step.get("op")
        if op not in STEP_OPS:
            raise _fail(f"{at}.op", f"{_short(op)} is unknown", ", ".join(STEP_OPS))
        if op == "shared":
            _keys(step, at, ("op", "claim", "spec"))
            _name(step["claim"], f"{at}.claim")
            _claim(step["spec"], f"{at}.spec")
        elif op == "arrive":
            _keys(step, at, ("op", "pod"))
            _pod(step["pod"], f"{at}.pod")
        elif op == "depart":
            _keys(step, at, ("op", "pod"))
            _name(step["pod"], f"{at}.pod")
        elif op in ("add-node", "replace-node"):
            _keys(step, at, ("op", "node", "board", "count", "mode"))
            _name(step["node"], f"{at}.node")
            _hardware(step, at)
        elif op == "switch-mode":
            _keys(step, at, ("op", "node", "mode"))
            _name(step["node"], f"{at}.node")
            _mode(step["mode"], f"{at}.mode")
        elif op == "roll-driver":
            _keys(step, at, ("op", "generation"))
            _type(step["generation"], int, f"{at}.generation", "a whole number")
        else:
            _keys(step, at, ("op", "node"))
            _name(step["node"], f"{at}.node")
    return steps


def _mode(value: Any, where: str) -> str:
    from fake_gpus.node import ModeError, parse_mode

    _type(value, str, where, "whole, static-mig:<layout> or dynamic-mig")
    try:
        parse_mode(value)
    except ModeError as exc:
        raise BundleError(f"{where}: {exc}") from exc
    return value


def _hardware(step: dict, at: str) -> None:
    """A node's board, GPU count and mode, checked as a layout's `--node NAME=BOARD:COUNT:MODE` is."""
    from testbed.clusters.layout import Layout, LayoutError, check_layout, parse_node_flag

    _type(step["board"], str, f"{at}.board", "a board key")
    _type(step["count"], int, f"{at}.count", "a whole number")
    _mode(step["mode"], f"{at}.mode")
    try:
        check_layout(Layout((parse_node_flag(f"{step['node']}={step['board']}:{step['count']}:{step['mode']}"),)))
    except LayoutError as exc:
        raise BundleError(f"{at}: {exc}") from exc


def read_json(file: Path, default: Any = None) -> Any:
    """A bundle's JSON file (`default` when absent); BundleError when it is not JSON."""
    if not file.is_file():
        return default
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{file}: is not valid JSON ({str(exc).splitlines()[0]}); valid: the file as a failing property wrote it") from exc


def check_context(context: Any, file: str = "context.json") -> dict:
    """context.json: an object; `faults` a comma-separated string of known faults, `k8s` a known minor."""
    from fake_gpus.driver.faults import FAULTS
    from hostenv.versions import RELEASES

    _type(context, dict, file, "an object")
    faults = context.get("faults")
    if faults is not None:
        _type(faults, str, f"{file}.faults", "a comma-separated list of fault names")
        unknown = [f for f in faults.split(",") if f and f not in FAULTS]
        if unknown:
            raise _fail(f"{file}.faults", f"{unknown[0]!r} is unknown", ", ".join(FAULTS))
    k8s = context.get("k8s")
    if k8s is not None and (not isinstance(k8s, str) or k8s.removeprefix("v") not in RELEASES):
        raise _fail(f"{file}.k8s", f"{_short(k8s)} is no known minor", ", ".join(sorted(RELEASES)))
    return context
