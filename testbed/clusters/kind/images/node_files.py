"""Files our kind node image carries besides binaries: init glue, systemd units, containerd settings.

Written for this project from kind's node-image contract (what kind runs on a node: /kind/version,
kubeadm with /kind/kubeadm.conf, systemctl, ctr import, kubectl apply of /kind/manifests/*).
"""

from __future__ import annotations

from testbed.clusters.kind.images.node_storage import MARKER_IN_NODE, SNAPSHOTS_IN_NODE

ENTRYPOINT = r"""#!/bin/bash
# Prepare a privileged container for systemd and a kubelet, then hand PID 1 to init.
set -o errexit -o nounset -o pipefail
say() { echo "dra-testbed node: $*" >&2; }

# systemd treats a writable /sys as "not a container"; --privileged mounts it read-write
mount -o remount,ro /sys || say "could not remount /sys read-only"
# kubelet needs shared propagation for Bidirectional / HostToContainer volume mounts
mount --make-rshared /

if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
  # cgroup v1 with a private cgroup namespace. Kind configures kubelet with cgroupRoot /kubelet
  # (kubelet.slice under the systemd driver): create it in every hierarchy and pin it with a self
  # bind mount, or systemd prunes the empty cgroup before kubelet starts.
  mount --make-rprivate /sys/fs/cgroup
  if [[ -d /sys/fs/cgroup/misc ]]; then
    # the misc controller is unknown to the runc in nested containers on v1
    umount /sys/fs/cgroup/misc && rmdir /sys/fs/cgroup/misc || say "could not drop the misc controller"
  fi
  for hierarchy in $(findmnt -lun -t cgroup -o target); do
    for root in kubelet kubelet.slice; do
      mkdir -p "$hierarchy/$root"
      if [[ -f $hierarchy/cpuset.cpus ]]; then
        # an empty cpuset makes every later attach fail with ENOSPC
        cat "$hierarchy/cpuset.cpus" >"$hierarchy/$root/cpuset.cpus"
        cat "$hierarchy/cpuset.mems" >"$hierarchy/$root/cpuset.mems"
      fi
      mount --bind "$hierarchy/$root" "$hierarchy/$root"
    done
  done
fi

# Lowering a process's oom_score_adj needs CAP_SYS_RESOURCE. Hosts whose bounding set lacks it make
# every pod sandbox fail (runc init cannot apply kubelet's -998), unless containerd clamps the value.
capbnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
if (( (16#$capbnd >> 24 & 1) == 0 )); then
  say "no CAP_SYS_RESOURCE: containerd will not lower oom_score_adj"
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml
fi

# unpacked images and container files in memory when the cluster asks for it (node_storage.py): before
# containerd starts, so it never sees the disk directory the tmpfs hides
if [[ -f @MARKER@ ]]; then
  mkdir -p @SNAPSHOTS@
  mount -t tmpfs -o mode=0700 tmpfs @SNAPSHOTS@ || say "could not mount a tmpfs for containerd's snapshots; they stay on disk"
fi

# every node of a cluster starts from the same image: give each its own machine id
rm -f /etc/machine-id
systemd-machine-id-setup >/dev/null 2>&1 || dbus-uuidgen --ensure=/etc/machine-id

# use the iptables backend the host's Docker wrote this container's rules with
legacy=$( (iptables-legacy-save 2>/dev/null || true) | grep -c '^-' || true)
nft=$( (iptables-nft-save 2>/dev/null || true) | grep -c '^-' || true)
if (( legacy > nft )); then
  update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null
  update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >/dev/null
fi

# Docker's embedded DNS answers at 127.0.0.11 inside this network namespace only; pods (CoreDNS
# above all, which would then query itself) need an address they can route to. Point the node's
# resolver at the default gateway and extend Docker's DNAT rules to it and to pod traffic.
gateway=$(ip -4 route show default | awk '{print $3; exit}')
if [[ -n $gateway ]] && grep -q '^nameserver 127\.0\.0\.11' /etc/resolv.conf; then
  iptables-save -t nat \
    | sed -e "s/-d 127\.0\.0\.11/-d $gateway/g" \
          -e 's/^-A OUTPUT \(.*\) -j DOCKER_OUTPUT$/&\n-A PREROUTING \1 -j DOCKER_OUTPUT/' \
          -e "s/--to-source :53/--to-source $gateway:53/g" \
    | iptables-restore || say "could not extend Docker's DNS rules to $gateway"
  resolv=$(sed "s/^nameserver 127\.0\.0\.11/nameserver $gateway/" /etc/resolv.conf)
  echo "$resolv" >/etc/resolv.conf  # a bind mount: rewrite in place, never replace
fi

exec "$@"
"""

CONTAINERD_CONFIG = """\
# containerd 2.x settings of a dra-testbed kind node
version = 3

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  # images are imported once and never pushed: keep only the unpacked snapshots
  discard_unpacked_layers = true
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{pause_image}'

[plugins.'io.containerd.cri.v1.runtime']
  # the DRA kubelet plugin hands containerd CDI device ids
  enable_cdi = true
  cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']
  # nested containers on some hosts have no hugetlb controller
  tolerate_missing_hugepages_controller = true
  # the entrypoint turns this on where the node lacks CAP_SYS_RESOURCE (see there)
  restrict_oom_score_adj = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      base_runtime_spec = '/etc/containerd/cri-base.json'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = true
        BinaryName = '/usr/local/sbin/runc'
"""

CONTAINERD_UNIT = """\
[Unit]
Description=containerd (dra-testbed kind node)
After=network.target local-fs.target
StartLimitIntervalSec=0

[Service]
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=1
LimitNOFILE=infinity
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""

KUBELET_UNIT = """\
[Unit]
Description=kubelet (dra-testbed kind node)
# kubeadm writes the config on init/join; until then there is nothing to run
ConditionPathExists=/var/lib/kubelet/config.yaml

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
RestartSec=1s
StartLimitInterval=0
Slice=kubelet.slice
KillMode=process
CPUAccounting=true
MemoryAccounting=true

[Install]
WantedBy=multi-user.target
"""

# kubeadm's own contract: flags it writes to kubeadm-flags.env, kubeconfigs it writes on join
KUBELET_DROPIN = """\
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
# cgroup v1: the systemd hierarchy needs the kubelet cgroup root too
ExecStartPre=/bin/sh -c "[ -f /sys/fs/cgroup/cgroup.controllers ] || mkdir -p /sys/fs/cgroup/systemd/kubelet"
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""

KUBELET_SLICE = """\
[Unit]
Description=Kubernetes kubelet and pods
Before=slices.target

[Slice]
CPUAccounting=true
MemoryAccounting=true
"""

KUBELET_DEFAULTS = "KUBELET_EXTRA_ARGS=--runtime-cgroups=/system.slice/containerd.service\n"

SYSCTL = """\
# pods reach services through the node; NodePorts on loopback need route_localnet
net.ipv4.ip_forward = 1
net.ipv4.conf.all.route_localnet = 1
"""

CRICTL_CONFIG = "runtime-endpoint: unix:///run/containerd/containerd.sock\nimage-endpoint: unix:///run/containerd/containerd.sock\n"

# kind applies this on `create` unless disableDefaultCNI is set; ours always sets it (see cluster.py),
# so the manifest only has to be valid: networking comes from per-node CNI configs we mount.
DEFAULT_CNI = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: dra-testbed-cni
  namespace: kube-system
data:
  note: "pod networking is configured per node by dra-testbed (ptp + host-local)"
"""

# No provisioner image is shipped: a default class keeps manifests that name one valid.
DEFAULT_STORAGE = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
"""

# units a node never needs inside a container, masked so boot stays quiet and fast
MASKED_UNITS = (
    "systemd-binfmt.service", "getty.target", "console-getty.service", "systemd-udevd.service",
    "systemd-udev-trigger.service", "systemd-modules-load.service", "apt-daily.timer",
    "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer", "systemd-networkd.service",
)


def static_files(pause_image: str, version: str) -> dict[str, tuple[str, int]]:
    """Path in the node -> (content, mode) for every text file of the node image."""
    return {
        "/usr/local/bin/entrypoint": (ENTRYPOINT.replace("@MARKER@", MARKER_IN_NODE).replace("@SNAPSHOTS@", SNAPSHOTS_IN_NODE), 0o755),
        "/etc/containerd/config.toml": (CONTAINERD_CONFIG.format(pause_image=pause_image), 0o644),
        "/etc/systemd/system/containerd.service": (CONTAINERD_UNIT, 0o644),
        "/etc/systemd/system/kubelet.service": (KUBELET_UNIT, 0o644),
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf": (KUBELET_DROPIN, 0o644),
        "/etc/systemd/system/kubelet.slice": (KUBELET_SLICE, 0o644),
        "/etc/default/kubelet": (KUBELET_DEFAULTS, 0o644),
        "/etc/sysctl.d/10-dra-testbed.conf": (SYSCTL, 0o644),
        "/etc/crictl.yaml": (CRICTL_CONFIG, 0o644),
        "/kind/version": (version, 0o644),
        "/kind/manifests/default-cni.yaml": (DEFAULT_CNI, 0o644),
        "/kind/manifests/default-storage.yaml": (DEFAULT_STORAGE, 0o644),
    }


PAUSE_C = r"""
/* A pod sandbox's placeholder process: sleep until told to stop, reaping orphans meanwhile. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    signal(SIGINT, stop);
    signal(SIGTERM, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"""
