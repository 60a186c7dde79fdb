"""Applying a sharing strategy to a claim's GPUs as NVIDIA's plugin does, and undoing it.

TimeSlicing: the node's nvidia-smi sets compute mode DEFAULT, then `compute-policy --set-timeslice N`; the
reset sets both back (DEFAULT, 0). MPS: compute mode EXCLUSIVE_PROCESS, a control-daemon Deployment
`mps-control-daemon-<claimUID>-<hash5>` pinned to the node (hash: the first 5 hex digits of the SHA-256 of
the devices' UUIDs, sorted and comma-joined), its pipe, shm and log directories under the plugin directory,
and CDI edits that hand a container the pipe and shm directories. NVIDIA's plugin mounts a tmpfs on the shm
directory (it runs as root); ours leaves it a plain directory, as a KWOK node runs no container that would
use it. The Deployment's container runs the script NVIDIA's template does, in shape: `nvidia-cuda-mps-control
-d`, one `set_default_*` command per setting piped to it, a startup file its startup probe reads, then the
control log followed; on a fake node it also mounts the node's fake-NVML state, where the stand-in
nvidia-cuda-mps-control (fake_gpus/nvml/mps_control.py) lists the daemon.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

MPS_PIPE_IN_CONTAINER = "/tmp/nvidia-mps"
MPS_SHM_IN_CONTAINER = "/dev/shm"
MPS_LOG_IN_CONTAINER = "/var/log/nvidia-mps"
NVML_STATE_IN_CONTAINER = "/var/lib/dra-testbed/nvml"  # fake_gpus.nvml.state.NODE_STATE_DIR, where the fake NVML looks
_MOUNT_OPTIONS = ["rw", "nosuid", "nodev", "bind"]
READY_TIMEOUT = 30.0  # NVIDIA's plugin retries its readiness check about 15 s; a loaded test machine is slower


class StrategyError(RuntimeError):
    """Applying or undoing a strategy failed; the message is NVIDIA's text for the same step."""


@dataclass(frozen=True)
class NvidiaSmi:
    """The node's nvidia-smi (the fake driver root's on a fake node: it finds its node's NVML by itself)."""

    path: str = "nvidia-smi"

    def _run(self, args: list[str]) -> None:
        try:
            proc = subprocess.run([self.path, *args], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StrategyError(f"error running nvidia-smi: {exc}") from exc
        if proc.returncode != 0:
            detail = (proc.stdout + proc.stderr).strip().splitlines()
            raise StrategyError(f"error running nvidia-smi: exit status {proc.returncode}" + (f" ({detail[-1]})" if detail else ""))

    def set_compute_mode(self, uuids: list[str], mode: str) -> None:
        for uuid in uuids:
            try:
                self._run(["-i", uuid, "-c", mode])
            except StrategyError as exc:
                raise StrategyError(f"error setting compute mode: {exc}") from exc

    def set_time_slice(self, uuids: list[str], interval: int) -> None:
        """NVIDIA's SetTimeSlice: compute mode DEFAULT, then the interval (0 default .. 3 long)."""
        self.set_compute_mode(uuids, "DEFAULT")
        for uuid in uuids:
            try:
                self._run(["compute-policy", "-i", uuid, "--set-timeslice", str(interval)])
            except StrategyError as exc:
                raise StrategyError(f"error setting time slice: {exc}") from exc


def mps_daemon_id(claim_uid: str, device_uuids: list[str]) -> str:
    return f"{claim_uid}-{hashlib.sha256(','.join(sorted(device_uuids)).encode()).hexdigest()[:5]}"


def mps_daemon_name(daemon_id: str) -> str:
    return f"mps-control-daemon-{daemon_id}"


def control_script(settings: dict[str, str]) -> str:
    """The control daemon container's shell script: start the daemon, hand it each setting, mark startup done
    (the startup probe's file), then follow its log (the container lives as long as the daemon should)."""
    run = "nvidia-cuda-mps-control"
    log = '"$CUDA_MPS_LOG_DIRECTORY"'  # the container's env names it (a stand-in runtime without mounts gives the host's path)
    lines = ["set -e", f"rm -f {log}/startup.log",
             f"{run} -d" + (" -M" if settings.get("MPS_MULTI_USER") == "true" else "")]
    if "MPS_ACTIVE_THREAD_PERCENTAGE" in settings:
        lines.append(f"echo set_default_active_thread_percentage {settings['MPS_ACTIVE_THREAD_PERCENTAGE']} | {run}")
    prefix = "MPS_PINNED_MEM_LIMIT_"
    lines += [f"echo set_default_device_pinned_mem_limit {k[len(prefix):]} {v} | {run}" for k, v in sorted(settings.items()) if k.startswith(prefix)]
    lines += [f'echo "startup complete" > {log}/startup.log', f"tail -n +1 -f {log}/control.log"]
    return "\n".join(lines)


@dataclass(frozen=True)
class MpsControl:
    """Where control daemons live: the node they are pinned to, their namespace, their files' root (as the plugin
    sees it; `host_root` as containers' runtime sees it) and the image the Deployment names."""

    api: client.ApiClient | None
    node: str
    namespace: str
    root: Path
    host_root: Path
    image: str = "nvcr.io/nvidia/k8s-dra-driver-gpu"
    nvml_state: Path | None = None  # a fake node's NVML state directory as the host sees it (None: a real node)

    def dirs(self, daemon_id: str) -> dict[str, Path]:
        return {name: self.root / daemon_id / name for name in ("pipe", "shm", "log")}

    def container_edits(self, daemon_id: str) -> dict:
        """NVIDIA's CDI edits of an MPS group: the pipe directory's variable and both directories mounted."""
        host = self.host_root / daemon_id
        return {"env": [f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_IN_CONTAINER}"],
                "mounts": [{"hostPath": str(host / "shm"), "containerPath": MPS_SHM_IN_CONTAINER, "options": list(_MOUNT_OPTIONS)},
                           {"hostPath": str(host / "pipe"), "containerPath": MPS_PIPE_IN_CONTAINER, "options": list(_MOUNT_OPTIONS)}]}

    def deployment(self, daemon_id: str, device_uuids: list[str], settings: dict[str, str]) -> dict:
        name = mps_daemon_name(daemon_id)
        env = [{"name": "CUDA_VISIBLE_DEVICES", "value": ",".join(sorted(device_uuids))},
               {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": MPS_PIPE_IN_CONTAINER},
               {"name": "CUDA_MPS_LOG_DIRECTORY", "value": MPS_LOG_IN_CONTAINER}]
        env += [{"name": k, "value": v} for k, v in sorted(settings.items())]
        host = self.host_root / daemon_id
        mounts = {"mps-pipe-directory": (host / "pipe", MPS_PIPE_IN_CONTAINER), "mps-shm-directory": (host / "shm", MPS_SHM_IN_CONTAINER),
                  "mps-log-directory": (host / "log", MPS_LOG_IN_CONTAINER)}
        if self.nvml_state is not None:
            mounts["fake-nvml-state"] = (self.nvml_state, NVML_STATE_IN_CONTAINER)
            env.append({"name": "FAKE_NVML_STATE_DIR", "value": NVML_STATE_IN_CONTAINER})
        startup = f"{MPS_LOG_IN_CONTAINER}/startup.log"
        container = {"name": "mps-control-daemon", "image": self.image, "env": env, "command": ["sh", "-c"], "args": [control_script(settings)],
                     "securityContext": {"privileged": True},
                     "startupProbe": {"exec": {"command": ["cat", startup]}, "initialDelaySeconds": 1, "periodSeconds": 1},
                     "volumeMounts": [{"name": n, "mountPath": c} for n, (_, c) in mounts.items()]}
        volumes = [{"name": n, "hostPath": {"path": str(h)}} for n, (h, _) in mounts.items()]
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": self.namespace, "labels": {"app": name}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"nodeName": self.node, "hostPID": True,
                                               "tolerations": [{"operator": "Exists"}],  # a fake node's taints must not keep it off
                                               "containers": [container], "volumes": volumes}}}}

    def start(self, daemon_id: str, device_uuids: list[str], settings: dict[str, str]) -> None:
        """Directories, then the Deployment (an existing one is this claim's from an earlier attempt)."""
        for d in self.dirs(daemon_id).values():
            d.mkdir(parents=True, exist_ok=True)
        apps = client.AppsV1Api(self._api())
        try:
            apps.create_namespaced_deployment(self.namespace, self.deployment(daemon_id, device_uuids, settings), _request_timeout=30)
        except ApiException as exc:
            if exc.status != 409:
                raise StrategyError(f"failed to create deployment: HTTP {exc.status} {exc.reason}") from exc

    def wait_ready(self, daemon_id: str, timeout: float = READY_TIMEOUT) -> None:
        """Until the Deployment has its one pod ready (NVIDIA's AssertReady); StrategyError with its last reason."""
        apps, core = client.AppsV1Api(self._api()), client.CoreV1Api(self._api())
        name = mps_daemon_name(daemon_id)
        deadline, reason, pause = time.monotonic() + timeout, "", 0.1
        while time.monotonic() < deadline:
            try:
                deployment = apps.read_namespaced_deployment(name, self.namespace, _request_timeout=30)
                pods = core.list_namespaced_pod(self.namespace, label_selector=f"app={name}", _request_timeout=30).items
            except ApiException as exc:
                reason = f"failed to get deployment: HTTP {exc.status} {exc.reason}"
            else:
                statuses = (pods[0].status.container_statuses or []) if len(pods) == 1 else []
                if (deployment.status.ready_replicas or 0) != 1:
                    reason = "waiting for MPS control daemon to come online"
                elif len(pods) != 1:
                    reason = f"unexpected number of pods in deployment: {len(pods)}"
                elif len(statuses) != 1 or not statuses[0].ready:
                    reason = "control daemon not yet ready"
                else:
                    return
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
        raise StrategyError(f"MPS control daemon is not yet ready: {reason}")

    def stop(self, daemon_id: str, keep_deployment: bool = False) -> None:
        """Delete the Deployment (foreground: its pod goes first) and the directories; nothing there is done.
        `keep_deployment`: fault mps-daemon-left-behind, the daemon keeps running."""
        if not (self.root / daemon_id).exists():
            return  # NVIDIA's rule: no directories, no daemon
        if keep_deployment:
            shutil.rmtree(self.root / daemon_id, ignore_errors=True)
            return
        try:
            client.AppsV1Api(self._api()).delete_namespaced_deployment(
                mps_daemon_name(daemon_id), self.namespace, propagation_policy="Foreground", _request_timeout=30)
        except ApiException as exc:
            if exc.status != 404:
                raise StrategyError(f"failed to delete deployment: HTTP {exc.status} {exc.reason}") from exc
        shutil.rmtree(self.root / daemon_id, ignore_errors=True)

    def _api(self) -> client.ApiClient:
        if self.api is None:
            raise StrategyError("MPS needs the API server (the plugin has no client)")
        return self.api
