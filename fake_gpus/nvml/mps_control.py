"""A stand-in for NVIDIA's `nvidia-cuda-mps-control` on a fake node (no CUDA here, so no real MPS).

It behaves as the real tool does for what NVIDIA's DRA driver uses of it (its MPS Deployment's script):
`nvidia-cuda-mps-control -d [-M]` starts a control daemon in the background for the GPUs of
$CUDA_VISIBLE_DEVICES (UUIDs or indices; all of the node's when unset) and returns once it listens;
`echo CMD | nvidia-cuda-mps-control` sends each line of stdin to the daemon of $CUDA_MPS_PIPE_DIRECTORY
(default /tmp/nvidia-mps) and prints its answers. Commands: set_default_active_thread_percentage N,
get_default_active_thread_percentage, set_default_device_pinned_mem_limit DEV LIMIT (DEV a UUID or index,
LIMIT as `1024M` or `2G`), get_default_device_pinned_mem_limit DEV, quit.

While it runs the daemon is listed in its node's fake-NVML state (state.py `mps`: one record per GPU, with
the defaults set through it), so a judge reads what a real daemon would hold in memory; it removes its
records when it quits or is terminated (SIGTERM/SIGINT). Unlike the real daemon it stays in its starter's
process group (the real one detaches): a container's end (the stand-in kubelet ends the pod's process
group) ends it as a container's cgroup ends the real one. The node is $FAKE_NVML_STATE_DIR, else NODE_STATE_DIR.
Log: control.log in $CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps), as the real daemon writes it.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from fake_gpus.nvml.state import NODE_STATE_DIR, MpsDaemonRecord, StateError, update_mps_daemons, validate_state_dir

NAME = "nvidia-cuda-mps-control"
SOCKET = "control"  # the daemon's socket in the pipe directory (the real one keeps its pipes there too)
LOCK = "control.lock"  # one daemon per pipe directory, as the real one allows
_LIMIT = re.compile(r"(\d+)([MG]?)")


def _env_dir(name: str, default: str) -> Path:
    return Path(os.environ.get(name) or default).absolute()  # absolute: the daemon changes into its pipe directory


def _gpus(state_dir: Path) -> list[int]:
    """The GPU indices CUDA_VISIBLE_DEVICES names (UUIDs or indices), as CUDA would enumerate them."""
    gpus, _ = validate_state_dir(state_dir)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [g.index for g in gpus]
    by_uuid = {g.uuid: g.index for g in gpus}
    out = []
    for item in filter(None, (v.strip() for v in visible.split(","))):
        if item in by_uuid:
            out.append(by_uuid[item])
        elif item.isdigit() and int(item) < len(gpus):
            out.append(int(item))
        else:
            break  # CUDA stops at the first entry it cannot resolve
    return out


class Daemon:
    """The control daemon's state: its GPUs' records, kept in the node's NVML state while it runs."""

    def __init__(self, state_dir: Path, pipe_dir: Path, log_dir: Path, gpus: Sequence[int], multi_user: bool) -> None:
        self.state_dir, self.pipe_dir, self.log_dir = state_dir, pipe_dir, log_dir
        self.uuids = [g.uuid for g in validate_state_dir(state_dir)[0]]
        self.records = {g: MpsDaemonRecord(g, os.getpid(), None, None, multi_user, str(pipe_dir.resolve())) for g in gpus}

    def log(self, line: str) -> None:
        with open(self.log_dir / "control.log", "a") as f:
            f.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n")

    def publish(self) -> None:
        update_mps_daemons(self.state_dir, os.getpid(), list(self.records.values()))

    def withdraw(self) -> None:
        update_mps_daemons(self.state_dir, os.getpid(), [])

    def _device(self, text: str) -> int | None:
        visible = sorted(self.records)
        if text in self.uuids and self.uuids.index(text) in self.records:
            return self.uuids.index(text)
        return visible[int(text)] if text.isdigit() and int(text) < len(visible) else None

    def command(self, line: str) -> tuple[str, bool]:
        """The answer to one command line, and whether the daemon quits."""
        words = line.split()
        self.log(f"Command: {line.strip()}")
        if words == ["quit"]:
            return "", True
        if len(words) == 2 and words[0] == "set_default_active_thread_percentage":
            try:
                value = float(words[1])
            except ValueError:
                return f"Invalid percentage {words[1]!r}; valid: 0 to 100", False
            if not 0 <= value <= 100:
                return f"Invalid percentage {words[1]!r}; valid: 0 to 100", False
            self.records = {g: replace(r, active_thread_percentage=int(value)) for g, r in self.records.items()}
            self.publish()
            return f"{value:.1f}", False
        if words == ["get_default_active_thread_percentage"]:
            values = {r.active_thread_percentage for r in self.records.values()} or {None}
            value = values.pop()
            return f"{100.0 if value is None else float(value):.1f}", False
        if len(words) in (2, 3) and words[0] in ("set_default_device_pinned_mem_limit", "get_default_device_pinned_mem_limit"):
            gpu = self._device(words[1])
            if gpu is None:
                return f"Invalid device {words[1]!r}; valid: a UUID or index of the daemon's devices", False
            if words[0].startswith("get") and len(words) == 2:
                mib = self.records[gpu].pinned_mib
                return "0" if mib is None else f"{mib}M", False
            if words[0].startswith("set") and len(words) == 3 and (m := _LIMIT.fullmatch(words[2])):
                mib = int(m[1]) * (1024 if m[2] == "G" else 1) if m[2] else int(m[1]) // 2**20
                self.records[gpu] = replace(self.records[gpu], pinned_mib=mib)
                self.publish()
                return "", False
            return f"Invalid limit in {line.strip()!r}; valid: a number of bytes, or with suffix M or G", False
        return f"Unknown command {line.strip()!r}", False

    def serve(self, ready_fd: int) -> None:
        os.chdir(self.pipe_dir)  # the socket by a relative name: a host's pipe directory may pass the 107-byte socket path limit
        path = Path(SOCKET)
        path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(SOCKET)
        server.listen(8)
        self.publish()
        self.log("Control daemon started")
        os.write(ready_fd, b"1")
        os.close(ready_fd)
        try:
            while True:
                conn, _ = server.accept()
                quitting = False
                try:
                    with conn, conn.makefile("rw") as stream:
                        line = stream.readline()
                        if not line.strip():
                            continue  # a probe (is a daemon there?) or a client gone: nothing to answer
                        answer, quitting = self.command(line)
                        stream.write(answer + "\n")
                except OSError:
                    pass  # the client left before the answer: the command took effect all the same
                if quitting:
                    self.log("Control daemon exiting")
                    return
        finally:
            self.withdraw()
            server.close()
            path.unlink(missing_ok=True)


def _start(multi_user: bool) -> int:
    state_dir = _env_dir("FAKE_NVML_STATE_DIR", NODE_STATE_DIR)
    pipe_dir = _env_dir("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    log_dir = _env_dir("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
    try:
        gpus = _gpus(state_dir)
    except StateError as exc:
        print(f"{NAME}: no GPUs: {exc}", file=sys.stderr)
        return 1
    for d in (pipe_dir, log_dir):
        d.mkdir(parents=True, exist_ok=True)
    lock = os.open(pipe_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)  # held by the daemon (inherited) for its life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child:  # the starter: back once the daemon listens (or has died)
        os.close(ready_w)
        if os.read(ready_r, 1) == b"1":
            return 0
        print(f"{NAME}: the control daemon did not start (see {log_dir / 'control.log'})", file=sys.stderr)
        return 1
    os.close(ready_r)
    daemon = Daemon(state_dir, pipe_dir, log_dir, gpus, multi_user)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(0))  # through serve's finally: the records go
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # a detached daemon: the starter's pipes must not stay open (a shell would wait on them)
            os.dup2(devnull, fd)
        daemon.serve(ready_w)
    except SystemExit:
        pass
    except Exception as exc:  # noqa: BLE001 - the daemon's last word goes to its log, as the real one's does
        daemon.log(f"Control daemon failed: {exc}")
        code = 1
    os._exit(code)


def _ask(pipe_dir: Path, line: str | None) -> str | None:
    """Send one command (None: just connect) to the daemon of `pipe_dir`; its answer, None if no daemon answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            os.chdir(pipe_dir)  # as the daemon binds it: by a relative name
            conn.connect(SOCKET)
            if line is None:
                return ""
            conn.sendall((line.strip() + "\n").encode())
            return conn.makefile("r").readline().rstrip("\n")
    except OSError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "-d":
        rest = args[1:]
        if rest not in ([], ["-M"]):
            print(f"{NAME}: unknown arguments {' '.join(rest)!r}; valid: -d [-M]", file=sys.stderr)
            return 2
        return _start(multi_user=rest == ["-M"])
    if args:
        print(f"{NAME}: unknown arguments {' '.join(args)!r}; valid: -d [-M] to start the daemon, or commands on stdin",
              file=sys.stderr)
        return 2
    pipe_dir = _env_dir("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    for line in sys.stdin:
        if not line.strip():
            continue
        answer = _ask(pipe_dir, line)
        if answer is None:
            print(f"Cannot find MPS control daemon process (pipe directory {pipe_dir})", file=sys.stderr)
            return 1
        if answer:
            print(answer)
    return 0


def write_launcher(bin_dir: Path) -> Path:
    """An executable `nvidia-cuda-mps-control` in `bin_dir` that runs this module with this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / NAME
    path.write_text(f"#!/bin/sh\n# stand-in: fake_gpus/nvml/mps_control.py\nexec {sys.executable} -m fake_gpus.nvml.mps_control \"$@\"\n")
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    sys.exit(main())
