"""Our DRA driver: the ResourceSlice publisher, the kubelet plugin, CDI. Reads the hardware through NVML only."""

from fake_gpus.driver import audit as _audit

_audit.install()  # before any driver module loads, so their imports are seen (no-op unless asked for)
