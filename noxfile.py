"""Sessions: `nox -s e2e` (bring up the default test bed, run the e2e suites, tear it down) and `nox -s tests`.

$DRA_TESTBED_K8S picks the Kubernetes minor (default 1.34); arguments after `--` go to pytest.
"""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

K8S = os.environ.get("DRA_TESTBED_K8S", "1.34")


def _prepare(session: nox.Session) -> None:
    """Install the project, then make sure the toolchain of the chosen minor is cached (built if need be)."""
    session.install("-e", ".[test]")
    session.run("dra-testbed", "toolchain", "ensure", "--k8s", K8S)


@nox.session
def tests(session: nox.Session) -> None:
    """Every suite: unit, fake NVML, driver, and the live-cluster suites on a KWOK test bed."""
    _prepare(session)
    session.run("python", "-m", "pytest", "suites", "-q", "-ra", "--k8s", K8S, *session.posargs)


@nox.session
def e2e(session: nox.Session) -> None:
    """The main job: the default test bed (KWOK, mixed H100/B200) and the end-to-end suites against it."""
    _prepare(session)
    session.run("python", "-m", "pytest", "suites/e2e", "-q", "-ra", "--k8s", K8S, *session.posargs)
