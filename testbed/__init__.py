"""dra-testbed: bring up Kubernetes clusters with DRA and fake NVIDIA GPUs, and test them."""
