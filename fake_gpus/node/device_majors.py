"""Character-device majors of NVIDIA's kernel modules on a fake node.

nvidia is 195 in every kernel; nvidia-uvm and nvidia-caps are dynamic in a real kernel and fixed here,
so the device nodes the driver hands to containers (CDI) agree with the node's /proc/devices view. Part
of the node contract: the driver (CDI specs) and the machine (/proc, /dev) both read them from here.
"""

NVIDIA_MAJOR = 195
NVIDIA_UVM_MAJOR = 511
NVIDIA_CAPS_MAJOR = 510
