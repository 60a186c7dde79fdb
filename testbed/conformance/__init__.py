"""Conformance suite for any DRA GPU driver: checks as data, black-box probes, a verdict with evidence.

`checks` is the table (id, level, requirement, source, backends, profiles, the faults that prove it
bites); `subject` is the cluster and driver under test; `slice_checks`, `name_checks`, `sched_checks`
and `generated` are the probes (Kubernetes API only); `run` runs a selection; `report` writes
junit.xml, e2e.log, results.json, report.html and PRODUCT.yaml; `command` is `dra-testbed conformance`.
"""
