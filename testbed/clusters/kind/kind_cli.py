"""Running the kind binary so that an interruption leaves nothing for the teardown to miss.

kind makes its node containers with `docker run` children, four at a time. Killed mid-create (Ctrl-C,
SIGTERM), kind goes at once but its children do not: each `docker run` whose request is under way still
gets its container made, seconds later on a loaded machine, after the teardown has looked for node
containers and found none of those. kind that fails on one node returns at once too, the other nodes'
`docker run`s still under way. So kind runs in a process group of its own, and when it has stopped or
ended, its container-making children are let finish (then there is a container to remove) while the
rest of the group (`docker logs -f`, `docker exec`) is stopped at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from hostenv.processes import group_members, read_stopped, stop_group
from testbed.host import progress

CREATING_WAIT = 120.0  # seconds an interrupted kind's `docker run`s get to finish making their containers
MAKES_CONTAINERS = ("run", "create")  # docker subcommands (also under `docker container`) that make one


def makes_container(pid: int) -> bool:
    """Whether process `pid` is a docker CLI making a container (`docker run`, `docker [container] create`)."""
    try:
        argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return False
    for i, arg in enumerate(argv[:-1]):
        if os.path.basename(arg).endswith("docker"):  # the CLI itself, or a script wrapping it (tests)
            rest = argv[i + 1:i + 3]
            return rest[0] in MAKES_CONTAINERS or (rest[0] == "container" and rest[1:2] and rest[1] in MAKES_CONTAINERS)
    return False


def settle_group(pgid: int, timeout: float = CREATING_WAIT) -> None:
    """Let the group's container-making children finish (up to `timeout` s), stopping every other member at
    once; then stop whatever is left."""
    deadline, told = time.monotonic() + timeout, False
    while time.monotonic() < deadline:
        members = group_members(pgid)
        making = [pid for pid in members if makes_container(pid)]
        if making and not told:
            told = True
            progress.note(f"kind ended with {len(making)} `docker run`(s) under way; letting them finish, so their containers get removed")
        for pid in set(members) - set(making):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not making:
            break
        time.sleep(0.2)
    stop_group(pgid, grace=0.0)


def run_kind(kind: Path, args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """`kind ARGS` with its output captured, its group settled (settle_group) once it has ended; on any exception
    (an interruption, the timeout) kind is killed and its group settled before the exception goes on."""
    proc = subprocess.Popen([str(kind), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        settle_group(proc.pid)
        read_stopped(proc)  # the group is gone, but a process that left it (setsid) may hold the pipes
        raise
    settle_group(proc.pid)  # kind's errors return on the first node that failed, with the others' `docker run`s under way
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
