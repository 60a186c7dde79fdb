"""The CEL helper is the scheduler's own compiler: matches, run-time errors and compile errors with positions."""

from __future__ import annotations

import pytest

from testbed.outcomes.cel import error_position, evaluate

H100 = ("gpu.nvidia.com", {"name": "gpu-0", "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"},
                                                             "driverVersion": {"version": "580.65.6"}},
                           "capacity": {"memory": {"value": "81559Mi"}}})
B200 = ("gpu.nvidia.com", {"name": "gpu-1", "attributes": {"productName": {"string": "NVIDIA B200"},
                                                             "driverVersion": {"version": "580.65.6"}},
                           "capacity": {"memory": {"value": "183359Mi"}}})


@pytest.mark.parametrize("expression, wanted", [
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) >= 0", (False, True)),
    ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H')", (True, False)),
    ("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))", (True, True)),
    ("device.driver == 'gpu.nvidia.com' && !has(device.attributes['gpu.nvidia.com'].profile)", (True, True)),
])
def test_expressions_match_as_the_scheduler_evaluates_them(expression: str, wanted: tuple[bool, bool], request) -> None:
    (result,) = evaluate(request.config.option.k8s, [expression], [H100, B200])
    assert result.compile_error is None
    assert result.matches == wanted
    assert result.errors == ("", "")


def test_a_missing_attribute_is_a_runtime_error_per_device(request) -> None:
    (result,) = evaluate(request.config.option.k8s, ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"], [H100])
    assert result.matches == (False,)
    assert "no such key: profile" in result.errors[0]


def test_a_syntax_error_carries_line_and_column(request) -> None:
    expression = "device.attributes['gpu.nvidia.com'].productName = 'x'"
    (result,) = evaluate(request.config.option.k8s, [expression], [H100])
    assert result.compile_error and "Syntax error" in result.compile_error
    line, column, message = result.position()
    assert (line, column) == (1, expression.index("=") + 1)
    assert "token recognition error" in message


def test_a_type_error_is_a_compile_error() -> None:
    assert error_position("ERROR: <input>:1:5: found no matching overload for '_>=_'") == (1, 5, "found no matching overload for '_>=_'")
