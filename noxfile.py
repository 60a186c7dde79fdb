"""Sessions: `nox -s e2e` (bring up the default test bed, run the e2e suites, tear it down) and `nox -s tests`."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]



def _install(session: nox.Session) -> None:
    session.install("-e", ".[test]")


@nox.session
def tests(session: nox.Session) -> None:
    """Every suite: unit, fake NVML, and the live-cluster suites on a KWOK test bed."""
    _install(session)
    session.run("dra-testbed", "toolchain", "ensure", "--k8s", "1.34")
    session.run("python", "-m", "pytest", "suites", "-q", "-ra", *session.posargs)


@nox.session
def e2e(session: nox.Session) -> None:
    """The main job: the default test bed (KWOK, Kubernetes 1.34, mixed H100/B200) and the e2e suites."""
    _install(session)
    session.run("dra-testbed", "toolchain", "ensure", "--k8s", "1.34")
    session.run("python", "-m", "pytest", "suites/e2e", "-q", "-ra", "-m", "cluster", *session.posargs)
