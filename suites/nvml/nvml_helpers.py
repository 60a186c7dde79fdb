"""Helpers shared by the fake NVML tests (imported by module name: pytest puts this dir on sys.path)."""

from __future__ import annotations

import json
import subprocess

import pytest

from fake_gpus.nvml.build import catalog_boards


def board_keys() -> list[str]:
    return [b.key for b in catalog_boards()]


def mig_board_keys() -> list[str]:
    return [b.key for b in catalog_boards() if b.gpu_instance_profiles]


def n(value: int | None) -> int:
    """Catalog facts nobody has seen are None; the library reports them as 0."""
    return int(value or 0)


def nvml_code(exc_info: pytest.ExceptionInfo) -> int:
    """The NVML return code carried by a pynvml NVMLError."""
    return exc_info.value.value


def json_lines(proc: subprocess.CompletedProcess) -> list:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


# a client printing, per visible GPU: [UUID, minor, [UUIDs of its visible MIG devices]]
VIEW = """
import json, pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    migs = []
    if pynvml.nvmlDeviceGetMigMode(h)[0]:
        for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                migs.append(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)))
            except pynvml.NVMLError_NotFound:
                pass
    print(json.dumps([pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetMinorNumber(h), migs]))
"""
