"""`python -m testbed.images build --k8s 1.34`."""

import sys

from testbed.images.cli import main

sys.exit(main())
