#!/usr/bin/env python3
"""An OCI runtime shim for dockerd: drop the capabilities this machine cannot grant, then run runc.

`docker run --privileged` asks for every capability Docker knows of. On hosts whose capability
bounding set lacks some of them (CAP_SYS_RESOURCE on our CI VMs) runc refuses with "unable to apply
caps: operation not permitted", which breaks kind. Before `create`, `run` and `exec`, this rewrites
the OCI spec (config.json in the bundle, or the --process file of exec) so that it asks only for
capabilities in our own bounding set. Everything else passes through to runc unchanged.

Installed by testbed.host.docker.dockerd as a dockerd runtime; standard library only, as dockerd runs it.
"""

from __future__ import annotations

import json
import os
import sys

REAL_RUNC_ENV = "DRA_TESTBED_REAL_RUNC"
DEFAULT_RUNC = "/usr/sbin/runc"
CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")

# Capability numbers as in linux/capability.h; only the names runc may be handed matter here.
CAP_NAMES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)


def bounding_caps() -> set[str]:
    """Names (CAP_*) of the capabilities in this process's bounding set."""
    with open("/proc/self/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("CapBnd:"))
    return {f"CAP_{name}" for bit, name in enumerate(CAP_NAMES) if mask >> bit & 1}


def strip_caps(path: str, allowed: set[str], nested: bool) -> None:
    """Remove capabilities outside `allowed` from the spec at `path` (config.json, or a process.json)."""
    try:
        with open(path) as handle:
            spec = json.load(handle)
    except (OSError, ValueError):
        return  # not ours to judge: runc reports a broken spec better than we would
    process = spec.get("process", {}) if nested else spec
    caps = process.get("capabilities") or {}
    changed = False
    for key in CAP_SETS:
        if key in caps and caps[key]:
            kept = [cap for cap in caps[key] if cap in allowed]
            changed |= kept != caps[key]
            caps[key] = kept
    if changed:
        tmp = path + ".capdrop"
        with open(tmp, "w") as handle:
            json.dump(spec, handle)
        os.replace(tmp, path)


def option_value(args: list[str], *names: str) -> str | None:
    """Value of the first of `names` (as `--x v` or `--x=v`) among `args`."""
    for index, arg in enumerate(args):
        for name in names:
            if arg == name and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def main(argv: list[str]) -> None:
    runc = os.environ.get(REAL_RUNC_ENV, DEFAULT_RUNC)
    command = next((arg for arg in argv if arg in ("create", "run", "exec")), None)
    if command in ("create", "run"):
        bundle = option_value(argv, "--bundle", "-b") or os.getcwd()
        strip_caps(os.path.join(bundle, "config.json"), bounding_caps(), nested=True)
    elif command == "exec":
        process = option_value(argv, "--process", "-p")
        if process:
            strip_caps(process, bounding_caps(), nested=False)
    os.execv(runc, [runc, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
