"""The session bed's cluster name: sessions at the same time never meet, a kept or reused bed keeps its name.

A fixed default name once let a colleague's session force-replace a CI session's cluster mid-test.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from testbed.pytest import plugin as pytest_plugin
from testbed.pytest.plugin import SESSION_LABEL, BedFactory, session_naming


class _Recorder:
    """A cluster that records the name it was made with and makes nothing."""

    made: list[str] = []

    def __init__(self, name: str) -> None:
        self.name, self.backend = name, "kwok"

    def exists(self) -> bool:
        return False

    def create(self, spec, force: bool = False) -> str:
        _Recorder.made.append(self.name)
        return "kubeconfig"

    def status(self):
        return SimpleNamespace(running=False)

    def api_client(self):
        return SimpleNamespace(close=lambda: None)

    def delete(self) -> None:
        pass


@pytest.fixture
def factory(monkeypatch):
    _Recorder.made = []
    monkeypatch.setattr(pytest_plugin, "cluster_for", lambda backend, name: _Recorder(name))

    def make(**options) -> BedFactory:
        opts = dict(keep_cluster=False, reuse_cluster=False, backend="kwok", k8s="1.34") | options
        return BedFactory(SimpleNamespace(option=SimpleNamespace(**opts)))
    return make


def _session_names(bed: BedFactory, args: list[str], times: int = 2) -> list[str]:
    """The names `times` sessions given the command-line `args` bring their beds up with."""
    parser = argparse.ArgumentParser()
    # the plugin's own options, added to a plain argparse parser (pytest's Parser is private to pytest)
    pytest_plugin.pytest_addoption(SimpleNamespace(getgroup=lambda name: SimpleNamespace(addoption=parser.add_argument)))
    for _ in range(times):
        with bed(None, **session_naming(parser.parse_args(args))):
            pass
    return _Recorder.made


def test_two_default_sessions_get_names_of_their_own(factory) -> None:
    first, second = _session_names(factory(), [])
    assert first != second and first.startswith(SESSION_LABEL + "-") and second.startswith(SESSION_LABEL + "-")


@pytest.mark.parametrize("flag", ["keep_cluster", "reuse_cluster"])
def test_a_kept_or_reused_session_bed_has_the_plain_name(factory, flag: str) -> None:
    assert _session_names(factory(**{flag: True}), [], times=1) == [SESSION_LABEL]


def test_an_explicit_name_is_used_as_given(factory) -> None:
    assert _session_names(factory(), ["--cluster-name", "mine"]) == ["mine", "mine"]
