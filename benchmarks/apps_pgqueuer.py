"""The factory `pgq run` starts in the worker benchmark: pgqueuer's QueueManager on
asyncpg with a no-op entrypoint; everything else is pgqueuer's default."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

import asyncpg
from pgqueuer import AsyncpgDriver, Queries, QueueManager

from benchmarks.gate import dsn, wait_at_gate


@contextlib.asynccontextmanager
async def factory() -> AsyncIterator[QueueManager]:
    wait_at_gate()
    conn = await asyncpg.connect(dsn())
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

    @manager.entrypoint("noop")
    async def noop(job: object) -> None:
        """Does nothing."""

    try:
        yield manager
    finally:
        await conn.close()


def main() -> None:
    """`pgq run benchmarks.apps_pgqueuer:factory`, pgqueuer's own command line. With the
    typer installed here, pgqueuer 1.6 hands its logger set-up the log level as a str
    where it expects its LogLevel enum, and stops: the level is converted first."""
    from pgqueuer.__main__ import main as pgq
    from pgqueuer.adapters.cli import cli
    from pgqueuer.core import logconfig

    set_up = logconfig.setup_fancy_logger
    cli.logconfig.setup_fancy_logger = lambda level: set_up(logconfig.LogLevel(str(level)))
    sys.argv = ["pgq", "run", "benchmarks.apps_pgqueuer:factory"]
    pgq()


if __name__ == "__main__":
    main()
