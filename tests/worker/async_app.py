"""An asyncio application that runs `queuecore.AsyncWorker` on its main thread, as a
test's real process: `python -m tests.worker.async_app DSN [CONCURRENCY]`. The worker
handles SIGTERM and SIGINT itself (W4)."""

from __future__ import annotations

import asyncio
import logging
import sys

import queuecore
from queuecore.observe.worklog import LOG_FORMAT
from tests.worker.async_handlers import REGISTRY


async def main(dsn: str, concurrency: int) -> None:
    async with queuecore.connect_async(dsn) as queue:
        worker = queuecore.AsyncWorker(queue, REGISTRY, concurrency=concurrency, prefetch=2)
        await worker.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1))
    print("exited cleanly")
