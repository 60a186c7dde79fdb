"""The project's two error roots: input the user can correct, and an environment that cannot do what was asked.

They live in hostenv, the bottom layer, because every package raises them: hostenv itself (an unknown Kubernetes
minor), fake_gpus (a malformed board file) and testbed (a cluster that does not start). A root defined higher up
could not be a base class of the errors below it, and `except` matches real base classes only (an ABC's
`register` does not count), so a second root per package would have to be caught once per package.
`testbed.errors` re-exports both; `dra-testbed` reports each as one line: bad input with exit code 2, an
environment problem with exit code 1.
"""


class BadInputError(ValueError):
    """Input that names something unknown, is malformed or does not fit together; the message says what is valid."""


class EnvironmentProblem(RuntimeError):
    """This machine or something running on it failed at what was asked: a missing host package, a Docker engine
    that fails, an image or toolchain that does not build, a cluster that does not start or cannot be found."""
