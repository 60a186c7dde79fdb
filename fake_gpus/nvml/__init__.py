"""Fake NVML: a C libnvidia-ml.so.1 backed by the board catalog and a per-node state directory."""
