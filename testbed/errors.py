"""Errors shared across the library that the CLI reports as bad input (exit code 2)."""


class UnknownNameError(ValueError):
    """A name (backend, binary, ...) that is not among the valid choices; the message lists them."""


class BadInputError(ValueError):
    """Arguments that do not fit together or name nothing that exists; the message says what is valid."""
