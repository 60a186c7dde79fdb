"""Apply user manifests to a test bed, wait until scheduling settles, and explain where each pod landed or why not.

Shared by `dra-testbed try`, the conformance suite and density runs: `manifests` (load, check, apply),
`cel` (the scheduler's own CEL compiler as a helper), `settle` (watch until every pod has a verdict),
`explain` (per pod: node, board, devices, or the reason and the nearest candidates).
"""
