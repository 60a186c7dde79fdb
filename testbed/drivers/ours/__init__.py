"""This project's fake-GPU driver (fake_gpus/driver): a ResourceSlice publisher and a kubelet plugin that read
the hardware through NVML only, publishing and preparing what NVIDIA's driver does."""

from testbed.clusters.driver import OURS, DriverKind, register

register(DriverKind(
    name=OURS,
    summary="this project's fake-GPU driver (default): our publisher and kubelet plugin on the fake NVML",
    backends={"kwok": "testbed.drivers.ours.kwok:OurDriver", "kind": "testbed.drivers.ours.kind:OurDriver"},
))
