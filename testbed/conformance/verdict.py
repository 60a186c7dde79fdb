"""The suite's verdict from its outcomes, and the exit code that goes with it.

pass: every MUST passed. fail: a MUST failed or errored. incomplete: no MUST failed, but one was
not run (the backend or subject could not run it) - never a pass.
"""

from __future__ import annotations

from typing import Sequence

from testbed.conformance.checks import MUST
from testbed.conformance.outcome import ERROR, FAIL, NOT_RUN, Outcome

PASSED, FAILED, INCOMPLETE = "pass", "fail", "incomplete"
EXIT_CODES = {PASSED: 0, FAILED: 1, INCOMPLETE: 3}  # 2 is bad input, as everywhere in dra-testbed


def verdict(outcomes: Sequence[Outcome]) -> str:
    musts = [o for o in outcomes if o.level == MUST]
    if any(o.verdict in (FAIL, ERROR) for o in musts):
        return FAILED
    if any(o.verdict == NOT_RUN for o in musts):
        return INCOMPLETE
    return PASSED


def exit_code(outcomes: Sequence[Outcome]) -> int:
    return EXIT_CODES[verdict(outcomes)]
