"""Binaries per Kubernetes minor: overrides, cache, official download, or a build from Go modules."""
