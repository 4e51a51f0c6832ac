"""`python -m queuecore` is the `queuecore` command."""

import sys

from queuecore.cli import main

sys.exit(main())
