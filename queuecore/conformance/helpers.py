"""Looking behind the queue's back: the tests check what is stored, not only what the API
says, so a method that answers right but writes wrong still fails."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine, event

from queuecore.sql.schema import jobs


def job_row(db: Engine, job_id: int) -> dict[str, Any] | None:
    """The stored row, raw: times as the epoch seconds the queue computed."""
    with db.connect() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).mappings().first()
    return None if row is None else dict(row)


def all_rows(db: Engine) -> dict[int, dict[str, Any]]:
    """Every stored row by id, to prove that an operation left the others alone."""
    with db.connect() as conn:
        rows = conn.execute(sa.select(jobs).order_by(jobs.c.id)).mappings().all()
    return {row["id"]: dict(row) for row in rows}


def count_jobs(db: Engine, state: str | None = None) -> int:
    query = sa.select(sa.func.count()).select_from(jobs)
    if state is not None:
        query = query.where(jobs.c.state == state)
    with db.connect() as conn:
        return conn.execute(query).scalar_one()


def epoch(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


@contextmanager
def capture_sql() -> Iterator[list[tuple[str, Any]]]:
    """Every (statement, parameters) any engine sends while the block runs, with a
    ("COMMIT", None) where a transaction ends, so a test can see transaction bounds.
    It listens on the Engine class, so it needs nothing from the queue but its API."""
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    def commit(_conn: Any) -> None:
        sent.append(("COMMIT", None))

    event.listen(Engine, "before_cursor_execute", record)
    event.listen(Engine, "commit", commit)
    try:
        yield sent
    finally:
        event.remove(Engine, "before_cursor_execute", record)
        event.remove(Engine, "commit", commit)
