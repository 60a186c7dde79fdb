"""Kubernetes' own DRA end-to-end suite (test/e2e/dra) run against our test beds."""
