"""Root conftest: every suite gets the dra-testbed fixtures and options, and unlisted skips fail the run."""

pytest_plugins = ["testbed.pytest.plugin", "testbed.pytest.skips", "suites.kind_bed"]
