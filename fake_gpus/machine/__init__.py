"""What a GPU node's operating system shows outside NVML, made from the catalog and the node's NVML state.

NVIDIA's DRA driver reads more than NVML: a driver root (libnvidia-ml.so, nvidia-smi), the nvidia-caps
capability files in /proc/driver and the nvidia-caps major in /proc/devices, and the PCI tree in
/sys/bus/pci (NUMA node, PCIe root). This package writes those views into a node's fake-NVML state
directory and runs a plain process with them in place (a private mount namespace).
"""
