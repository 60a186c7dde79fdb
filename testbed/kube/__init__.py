"""Kubernetes API helpers over the official client: retries, typed views, namespaces, drains, watches,
what a container gets from CDI specs, and slice comparison."""
