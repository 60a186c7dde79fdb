"""`python -m testbed.fresh`: see testbed.fresh.machine."""

from testbed.fresh.machine import main

if __name__ == "__main__":
    raise SystemExit(main())
