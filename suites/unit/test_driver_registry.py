"""Drivers under test register themselves (testbed.clusters.driver); a driver registered from this test module,
and nowhere else, is accepted by every command that takes --driver, by the pytest plugin and by the backends."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from testbed.cli.driver_option import driver_from_args
from testbed.cli.main import build_parser
from testbed.clusters.driver import BINARY, DriverKind, DriverSpec, DriverSpecError, register, registered, unregister
from testbed.clusters.kind.driver import KindDriver, kind_driver
from testbed.clusters.kwok.driver import KwokDriver, kwok_driver, stop_every_driver

STOPPED: list[Path] = []


class ToyKwokDriver(KwokDriver):
    """A driver that runs nothing: enough for the seam."""

    runs = ("toy", BINARY)

    def spawn(self, home: Path, kubeconfig: Path, layout) -> None:  # pragma: no cover - never brought up here
        pass

    def wait(self, home: Path) -> None:  # pragma: no cover
        pass

    @classmethod
    def stop(cls, home: Path) -> None:
        STOPPED.append(home)


@pytest.fixture
def toy(tmp_path: Path):
    """The toy driver, registered for one test (so the generated CLI reference never sees it)."""
    binary = tmp_path / "toy-plugin"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    register(DriverKind(name="toy", summary="a driver of this test's own", backends={"kwok": f"{__name__}:ToyKwokDriver"},
                        ways=(BINARY,)))
    yield binary
    unregister("toy")


# every command that brings up or runs a driver, with the other arguments it needs
COMMANDS = {
    "up": ["up", "--node", "n=h100-80gb:1:whole"],
    "try": ["try", "clusters/examples"],
    "conformance": ["conformance", "--backend", "kwok"],
    "density": ["density", "--trace", "t.csv", "--fleet", "f.yaml"],
    "upstream-e2e": ["upstream-e2e"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_takes_a_registered_driver(command: str, toy: Path) -> None:
    args = build_parser().parse_args([*COMMANDS[command], "--driver", "toy"])
    assert driver_from_args(args) == DriverSpec("toy")
    args = build_parser().parse_args([*COMMANDS[command], "--driver", "toy", "--driver-binary", str(toy)])
    assert driver_from_args(args).path == str(toy.resolve())


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_an_unregistered_driver_in_one_line(command: str) -> None:
    args = build_parser().parse_args([*COMMANDS[command], "--driver", "toy"])
    with pytest.raises(DriverSpecError) as refused:
        driver_from_args(args)
    assert str(refused.value) == f"unknown driver 'toy'; valid: {', '.join(registered())}"


def test_the_help_lists_every_registered_driver(toy: Path) -> None:
    up = build_parser()._subparsers._group_actions[0].choices["up"]  # noqa: SLF001 - argparse keeps subparsers there
    assert "ours|nvidia|toy" in up.format_help()


def test_the_pytest_plugin_takes_a_registered_driver(toy: Path) -> None:
    from testbed.pytest.plugin import session_driver

    assert session_driver(argparse.Namespace(driver="toy", driver_binary=None, driver_image=None, driver_name=None)) == DriverSpec("toy")


def test_backends_find_its_implementation_and_stop_it(toy: Path, tmp_path: Path) -> None:
    assert isinstance(kwok_driver(DriverSpec("toy")), ToyKwokDriver)
    STOPPED.clear()
    stop_every_driver(tmp_path)  # `down` stops whichever registered driver runs
    assert STOPPED == [tmp_path]
    with pytest.raises(DriverSpecError, match="^the kind backend cannot run driver 'toy'; it runs on: kwok$"):
        kind_driver(DriverSpec("toy"))
    with pytest.raises(DriverSpecError, match="^--driver-image does not go with driver 'toy'; it goes with: nvidia$"):
        driver_from_args(build_parser().parse_args(["up", "--driver", "toy", "--driver-image", "x:1"]))


def test_a_backend_refuses_a_way_its_driver_class_does_not_take() -> None:
    class ImageOnly(KindDriver):
        runs = ("image",)

        def deploy(self, cluster, layout, minor) -> None:  # pragma: no cover
            pass

    with pytest.raises(DriverSpecError, match="^the kind backend cannot run driver 'ours' from 'ours'; valid here: image$"):
        ImageOnly(DriverSpec())
