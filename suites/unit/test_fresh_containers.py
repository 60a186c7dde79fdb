"""The fresh machine's leftovers include its containers' processes: a kind node's systemd and kubelet have mount
namespaces of their own, so the machine's mount namespace alone never names them."""

from __future__ import annotations

from pathlib import Path

from testbed.fresh import machine as fresh

OURS, HOSTS = "a" * 64, "b" * 64


def _proc(tmp_path: Path, cgroups: dict[str, str | None]) -> Path:
    proc = tmp_path / "proc"
    for name, text in cgroups.items():
        (proc / name).mkdir(parents=True)
        if text is not None:
            (proc / name / "cgroup").write_text(text)
    return proc


def test_processes_in_the_machines_containers_are_found_and_no_others(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {
        "101": f"4:memory:/docker/{OURS}/kubelet.slice/kubelet.service\n0::/docker/{OURS}/kubelet.slice/kubelet.service\n",
        "102": f"0::/docker/{OURS}\n",  # the node's systemd, at the container's own cgroup
        "201": f"0::/docker/{HOSTS}/init.scope\n",  # a container of the host's engine
        "301": "4:memory:/process_api/x\n0::/\n",
        "302": None,  # gone while we looked
        "self": "0::/\n",
    })
    assert sorted(fresh.in_containers({OURS}, proc)) == [101, 102]
    assert fresh.in_containers(set(), proc) == []


def test_the_containers_are_read_from_the_machines_engine(tmp_path: Path) -> None:
    assert fresh._containers_of(tmp_path) == set()
    (tmp_path / fresh.MACHINE_CONTAINERS / OURS).mkdir(parents=True)
    assert fresh._containers_of(tmp_path) == {OURS}


def test_the_engine_folder_is_where_the_project_puts_it_under_the_machines_home(monkeypatch) -> None:
    from testbed.host.docker.dockerd import engine_dir

    monkeypatch.delenv("DRA_TESTBED_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/root")  # the machine's (testbed/fresh/machine.py runs the commands with HOME=/root)
    assert engine_dir() / "data" / "containers" == Path("/") / fresh.MACHINE_CONTAINERS
