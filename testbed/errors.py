"""The two error roots of the test bed (defined in hostenv.errors, below every package that raises them) and
the errors shared across the library.

`dra-testbed` catches each root once: BadInputError is one line and exit code 2 (nothing started),
EnvironmentProblem one line and exit code 1.
"""

from hostenv.errors import BadInputError, EnvironmentProblem

__all__ = ["BadInputError", "EnvironmentProblem", "UnknownNameError"]


class UnknownNameError(BadInputError):
    """A name (backend, binary, ...) that is not among the valid choices; the message lists them."""
