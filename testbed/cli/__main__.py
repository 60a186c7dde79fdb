"""`python -m testbed.cli`, the same as the `dra-testbed` executable."""

from testbed.cli.main import run

if __name__ == "__main__":
    run()
