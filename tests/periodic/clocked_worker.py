"""A real worker process whose queue reads its clock from a file, so that a test can hold
time still or make it jump, across processes and restarts:

    python -m tests.periodic.clocked_worker DSN CLOCK_FILE
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import queuecore
from tests.periodic.jobs import REGISTRY


def main() -> None:
    dsn, clock_file = sys.argv[1], Path(sys.argv[2])
    logging.basicConfig(level=logging.INFO, format="%(name)s[%(process)d]: %(message)s")
    queue = queuecore.connect(dsn, clock=lambda: float(clock_file.read_text()))
    try:
        queuecore.Worker(queue, REGISTRY, poll_interval=0.2, ack_batch=1).run()
    finally:
        queue.close()


if __name__ == "__main__":
    main()
