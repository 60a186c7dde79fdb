"""Fake NVIDIA GPUs: the hardware catalog, a fake NVML library and a DRA driver on top of it."""
