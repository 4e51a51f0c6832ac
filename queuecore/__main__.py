"""`python -m queuecore` is the `queuecore` command."""

import sys

from queuecore.cli.main import main

sys.exit(main())
