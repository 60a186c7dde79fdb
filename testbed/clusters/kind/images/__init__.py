"""Images of the kind backend built offline: Debian roots, the node image and its components, the GPU workers'
image, our driver's and workload images."""
