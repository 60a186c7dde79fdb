"""The plugin's readiness endpoint (the kind DaemonSet's readinessProbe): ready only once the kubelet
registered it and while both its sockets answer."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from fake_gpus.driver.readiness import PATH


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _probe(port: int) -> tuple[int, str]:
    """What the kubelet's httpGet probe sees."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{PATH}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_ready_once_registered_not_ready_when_a_socket_is_gone(start_plugin, state_dir, kubelet) -> None:
    port = _free_port()
    plugin = start_plugin(state_dir, args=["--ready-port", str(port)])
    code, body = _probe(port)
    assert (code, body.strip()) == (503, "the kubelet has not registered the plugin"), body
    client = kubelet(plugin)
    client.get_info()
    client.notify_registered(True)
    assert _probe(port) == (200, "ok\n")
    plugin.dra_socket.unlink()  # e.g. /var/lib/kubelet/plugins wiped under a running plugin
    code, body = _probe(port)
    assert code == 503 and f"{plugin.dra_socket} is missing" in body, body


def test_not_ready_when_the_kubelet_refused_it(start_plugin, state_dir, kubelet) -> None:
    port = _free_port()
    plugin = start_plugin(state_dir, args=["--ready-port", str(port)])
    kubelet(plugin).notify_registered(False, "unsupported versions")
    code, body = _probe(port)
    assert code == 503 and "refused" in body, body


def test_not_ready_when_the_registration_socket_stops_answering(start_plugin, state_dir, kubelet) -> None:
    port = _free_port()
    plugin = start_plugin(state_dir, args=["--ready-port", str(port)])
    kubelet(plugin).notify_registered(True)
    assert _probe(port)[0] == 200
    # another socket bound at the path, listening to nobody: it is there, but GetInfo gets no answer
    plugin.registration_socket.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(plugin.registration_socket))
        code, body = _probe(port)
    assert code == 503 and "does not answer GetInfo" in body, body
