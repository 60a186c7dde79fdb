"""Density replays: a GPU trace through the real scheduler on KWOK, once per driver mode.

`trace` reads the pod list, `mapping` turns each pod's GPU share into the same claim for every mode,
`replay` drives one mode's cluster through the trace's events (followed with `testbed.outcomes.settle`),
`metrics` summarises a run, `report` writes density.json, PNG plots and an HTML page.
"""
