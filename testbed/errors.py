"""Errors shared across the library that the CLI reports as bad input (exit code 2)."""


class UnknownNameError(ValueError):
    """A name (backend, binary, ...) that is not among the valid choices; the message lists them."""
