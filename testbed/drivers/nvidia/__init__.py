"""NVIDIA's own DRA driver (gpu-kubelet-plugin) as a test-bed driver: found by path, one process per node."""
