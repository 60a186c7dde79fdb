"""Host plumbing shared by `fake_gpus` and `testbed`: cache and state directories, the Go environment,
pinned versions per Kubernetes minor, and stopping processes. Imports nothing of either package."""
