"""Root conftest: every suite gets the dra-testbed fixtures and options."""

pytest_plugins = ["testbed.pytest_plugin"]
