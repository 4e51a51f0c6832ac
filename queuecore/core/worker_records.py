"""R33's statements and plans: each worker keeps a record of itself in the database, and
`workers()` lists them, gone ones marked.

A worker writes its record when it starts and again every heartbeat (one UPDATE per
interval, whatever the number of jobs), and deletes it when it stops cleanly. A record
not seen for three heartbeats reads as gone; one not seen for an hour is pruned when a
worker starts, and never listed meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Double, bindparam, delete, insert, select, update

from queuecore.core.plans import Program, Run, Tx
from queuecore.job import WorkerInfo, to_datetime
from queuecore.sql.schema import workers

if TYPE_CHECKING:
    from queuecore.core.operations import Operations
    from queuecore.sql.statements import Now

#: A worker not seen for this many of its heartbeats is shown as gone.
MISSED_HEARTBEATS = 3
#: A gone worker's record is dropped this long (seconds) after it was last seen.
KEPT_SECONDS = 3600.0

#: What a worker reports of itself (`report_worker`'s `record`).
REPORTED = ("host", "pid", "queues", "kinds", "concurrency", "heartbeat_seconds", "running")


class WorkerStatements:
    """The statements of R33, built once with the queue's clock expression."""

    def __init__(self, now: Now) -> None:
        # Bound as `w_<column>`: SQLAlchemy keeps a column's own name for itself.
        name = workers.c.name == bindparam("w_name")
        reported = {c: bindparam(f"w_{c}", type_=workers.c[c].type) for c in REPORTED}
        self.seen = update(workers).where(name).values(**reported, last_seen_at=now)
        self.register = insert(workers).values(
            name=bindparam("w_name"), **reported, started_at=now, last_seen_at=now
        )
        recent = workers.c.last_seen_at >= now - bindparam("kept", type_=Double)
        self.prune = delete(workers).where(~recent)
        self.forget = delete(workers).where(name)
        self.listed = select(workers, now.label("now")).where(recent).order_by(workers.c.name)


def report(ops: Operations, name: str, record: dict[str, Any]) -> Tx[None]:
    """`record`'s REPORTED values under `name`: its record updated, or written anew (and
    records gone for an hour pruned) when there is none yet."""
    values = {f"w_{k}": record[k] for k in REPORTED}
    params = ops.params(w_name=name, kept=KEPT_SECONDS, **values)
    return Tx(_report(ops, params))


def _report(ops: Operations, params: dict[str, Any]) -> Program[None]:
    statements = ops.worker_statements
    if (yield Run(statements.seen, params)).rowcount == 0:
        yield Run(statements.prune, params)
        yield Run(statements.register, params)


def forget(ops: Operations, name: str) -> Tx[None]:
    return Tx(_run(Run(ops.worker_statements.forget, ops.params(w_name=name))))


def _run(step: Run) -> Program[None]:
    yield step


def listed(ops: Operations) -> Tx[list[WorkerInfo]]:
    return Tx(_listed(ops), write=False)


def _listed(ops: Operations) -> Program[list[WorkerInfo]]:
    rows = yield Run(ops.worker_statements.listed, ops.params(kept=KEPT_SECONDS))
    return [_info(row) for row in rows]


def _info(row: Any) -> WorkerInfo:
    unseen = float(row.now) - row.last_seen_at
    return WorkerInfo(
        name=row.name,
        host=row.host,
        pid=row.pid,
        queues=row.queues,
        kinds=row.kinds,
        concurrency=row.concurrency,
        started_at=to_datetime(row.started_at),
        last_seen_at=to_datetime(row.last_seen_at),
        running=row.running,
        heartbeat_seconds=row.heartbeat_seconds,
        gone=unseen > MISSED_HEARTBEATS * row.heartbeat_seconds,
    )
