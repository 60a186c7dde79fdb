"""Test beds: one life cycle (create or reuse, retry, images, logs, teardown) for every cluster the project
brings up for a run of its own: the pytest fixtures, the conformance and campaign beds, try, density,
upstream-e2e and replay."""

from testbed.beds.lifecycle import Bed, BedRefused, bed_session, owed

__all__ = ["Bed", "BedRefused", "bed_session", "owed"]
