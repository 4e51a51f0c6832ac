"""PostgreSQL: many hosts. Claims skip rows other claims hold (FOR UPDATE SKIP LOCKED);
enqueues NOTIFY idle workers, which LISTEN on a connection of their own (W6)."""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import (
    URL,
    Connection,
    Double,
    Engine,
    Insert,
    bindparam,
    func,
    make_url,
    select,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from queuecore.contract import Backend, BackendClass, QueueStatements
from queuecore.core.plans import DriverStep, Hot, Outcome
from queuecore.core.statistics import ClaimSortCheck
from queuecore.errors import DatabaseLimitError, QueuecoreError, StorageFullError
from queuecore.executors.sqlqueue import SQLQueue
from queuecore.job import Completions, Job
from queuecore.sql import statements
from queuecore.sql.schema import jobs

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("queuecore")

CHANNEL = "queuecore"
#: SQLSTATEs of a transaction the server rolled back: serialization failure, deadlock.
ROLLED_BACK = ("40001", "40P01")
DISK_FULL, CONFIGURATION_LIMIT = "53100", "53400"
#: Any fixed number: migrations of one database take turns on this advisory lock.
MIGRATION_LOCK = 0x71C0_5E11
_SEQUENCE = "pg_get_serial_sequence(:table, 'id')"
_SEQUENCE_READ = sa.text(f"SELECT pg_sequence_last_value({_SEQUENCE}::regclass)")
_SEQUENCE_WRITE = sa.text(f"SELECT setval({_SEQUENCE}, :value, true)")
#: The DSN's query parameter handed to psycopg rather than to libpq (`driver_options`).
PREPARE_THRESHOLD = "prepare_threshold"
NOTIFY = select(func.pg_notify(CHANNEL, bindparam("payload")))
#: Where a cancel announces the job it cancelled (its id), to the workers' listeners (W9).
CANCEL_CHANNEL = "queuecore_cancelled"
CANCEL_NOTIFY = select(func.pg_notify(CANCEL_CHANNEL, bindparam("payload")))
#: Where migration 0003's trigger announces that an awaited job finished (its id).
FINISHED_CHANNEL = "queuecore_finished"
LISTEN_SLICE = 0.5  # how long the listener thread may take to see that its queue closed


class PostgresBackend(Backend):
    """One round trip per claim and per complete: each is a single statement run in
    autocommit (R08's dead state is written by the claim that meets the row)."""

    insert = staticmethod(postgresql.insert)
    returns_from_columns = True
    wait_pause_cap = 2.0  # the NOTIFY wakes a waiter; polling is only the fallback

    def __init__(self, dialect: sa.Dialect, *, notify: bool = True) -> None:
        super().__init__(dialect)
        self.notify = notify

    def server_now(self) -> ColumnElement[float]:
        """The server's clock, read once per statement (an InitPlan): workers on several
        hosts share it, so their own clocks' skew cannot shorten or stretch a lease.
        `now()` would be the transaction's start, not the statement's."""
        return select(
            sa.cast(func.extract("epoch", func.clock_timestamp()), Double)
        ).scalar_subquery()

    def refresh_statistics(self) -> ClauseElement | None:
        """ANALYZE: without statistics the planner guesses that a handful of rows are
        ready, reads them all through a bitmap and sorts them, for every claim, where the
        ready index's order would stop at the limit (measured: a backlog of 60,000 jobs
        drained at 5,000 jobs/s, 20,000 once analyzed). Autovacuum analyzes the table
        too (migration 0002), but only on its next round, up to a minute later."""
        return sa.text(f"ANALYZE {jobs.name}")

    def claim_sort_check(self) -> ClaimSortCheck | None:
        return ClaimSortCheck("EXPLAIN (FORMAT JSON)", _plan_sorts)

    def announce(self, queue: str) -> list[tuple[Any, dict[str, Any]]]:
        """Delivered at commit, and only then: a rolled-back enqueue wakes nobody."""
        return [(NOTIFY, {"payload": queue})] if self.notify else []

    def announce_cancel(self, job_id: int) -> list[tuple[Any, dict[str, Any]]]:
        """Sent whatever `notify` says: a cancel is rare, and a worker running the job
        must hear it within a second (W9)."""
        return [(CANCEL_NOTIFY, {"payload": str(job_id)})]

    def announcing(self, insert: Insert) -> ClauseElement:
        """One round trip: the INSERT as a data-modifying CTE, and its NOTIFY (sent once,
        at commit) beside it in the same statement."""
        if not self.notify:
            return insert
        written = insert.cte("written")
        woken = select(func.pg_notify(CHANNEL, bindparam("queue")).label("woken")).cte("woken")
        return select(written.c.id).select_from(written.join(woken, sa.true()))

    def build(self, ops: QueueStatements) -> None:
        self.stmt_mark_awaited = statements.mark_awaited()
        self.hot_complete_batch = ops.compile(statements.complete_batch(ops.now_sql))
        payloads = func.jsonb_array_elements(bindparam("payloads", type_=JSONB))
        ops.hot_enqueue_many = ops.compile(
            self.announcing(statements.enqueue_batch(ops.now_sql, payloads))
        )

    def complete_fenced(self, ops: QueueStatements, batch: Sequence[Job]) -> Hot[Completions]:
        """One statement for the whole batch: the (id, token) pairs go as two arrays."""
        params = ops.params(
            job_ids=[job.id for job in batch], tokens=[job.lease_token for job in batch]
        )

        def finish(outcomes: list[Outcome]) -> Completions:
            passed = set(outcomes[0][1])
            results = Completions()
            for job in batch:
                # The same claim listed twice completes once, as two calls to complete() would.
                fence = (job.id, job.lease_token)
                results.append(fence in passed)
                passed.discard(fence)
            return results

        return Hot([(self.hot_complete_batch, params)], finish)

    def failure(self, error: Exception) -> type[QueuecoreError] | None:
        """Class 53's disk_full; class 54 (program limit exceeded: an index row, a NOTIFY
        payload) and 53400 (configuration limit exceeded) are the server's limits."""
        state = getattr(getattr(error, "orig", None), "sqlstate", None) or ""
        if state == DISK_FULL:
            return StorageFullError
        if state.startswith("54") or state == CONFIGURATION_LIMIT:
            return DatabaseLimitError
        return None

    def rolled_back(self, error: Exception) -> bool:
        """A deadlock broken, or a serialization failure: the server rolled back all."""
        return getattr(getattr(error, "orig", None), "sqlstate", None) in ROLLED_BACK

    def prepare_hot_connection(self, conn: Any) -> None:
        """Autocommit: a single statement is its own transaction, in one round trip."""
        conn.autocommit = True

    def run_on_driver(self, conn: Any, steps: Sequence[DriverStep]) -> list[Outcome]:
        if len(steps) == 1:
            return [_run(conn, *steps[0])]
        with conn.transaction():
            return [_run(conn, sql, params) for sql, params in steps]


@dataclass(frozen=True)
class PostgresOptions:
    """The options only PostgreSQL acts on; every other backend accepts and ignores them.

    - `notify`: `False` spares enqueue its NOTIFY (a global lock at commit) when the write
      load is heavy and workers are busy anyway; idle workers then poll.
    """

    notify: bool = True


class PostgresQueue(SQLQueue):
    """PostgreSQL: the engine, the id sequence, and LISTEN for idle workers and `wait()`."""

    backend_class = PostgresBackend
    backend_options = PostgresOptions
    backend: PostgresBackend  # what make_backend builds from backend_class
    settings: PostgresOptions

    def __init__(self, bind: str | URL | Engine, **options: Any) -> None:
        super().__init__(bind, **options)
        self._finished = FinishedListener(self.engine)

    @property
    def notify(self) -> bool:
        """Whether enqueue sends a NOTIFY (the `notify` option)."""
        return self.settings.notify

    def make_backend(self) -> PostgresBackend:
        return PostgresBackend(self.engine.dialect, notify=self.settings.notify)

    @classmethod
    def create_engine(
        cls, bind: str | URL | Engine, options: PostgresOptions = PostgresOptions(), **pool: Any
    ) -> Engine:
        """The engine, with SQLAlchemy's `pool` options (`options` are the queue's)."""
        if isinstance(bind, Engine):
            return bind.execution_options(queuecore_postgresql=True)  # its pool, our options
        url, pool = engine_arguments(bind, pool)
        try:
            return sa.create_engine(url, **pool)
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                f"{exc}; the PostgreSQL backend needs psycopg 3: "
                "pip install 'queuecore[postgresql]'"
            ) from exc

    @classmethod
    @contextmanager
    def migrating(cls, engine: Engine) -> Iterator[None]:
        """An advisory lock of a transaction of its own, kept open until the migration's
        transaction (on another connection) has committed. A transaction's lock, not a
        session's: behind a transaction-mode pooler (R34) the session is not ours between
        transactions, and a session lock would be left on a server connection that the
        pooler hands to others, while an open transaction keeps its server connection."""
        with engine.connect() as conn:
            held = conn.begin()
            try:
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
                yield
            finally:
                held.rollback()  # it wrote nothing: its end only lets the lock go

    @classmethod
    def id_sequence(cls, conn: Connection) -> int:
        """The id column's own sequence (bigserial); NULL until it handed out its first."""
        return int(conn.execute(_SEQUENCE_READ, {"table": jobs.name}).scalar() or 0)

    @classmethod
    def advance_id_sequence(cls, conn: Connection, at_least: int) -> None:
        if at_least >= 1 and cls.id_sequence(conn) < at_least:
            conn.execute(_SEQUENCE_WRITE, {"table": jobs.name, "value": at_least})

    def listen(self) -> Notifications:
        return Notifications(self.engine)

    @contextmanager
    def finish_signal(self, job_id: int) -> Iterator[Finished]:
        """LISTEN first (one connection for every waiter of this queue), then mark the job
        awaited: from then on the trigger NOTIFYs its end, and `wait()` looks at the job
        only after both, so no end goes unheard. Other jobs' completions send nothing (the
        trigger's WHEN), so they take no NOTIFY lock. A waiter holds no pooled connection:
        a web app with many clients waiting does not drain its pool."""
        with self._finished.watching(job_id) as finished:
            with self.engine.begin() as conn:
                conn.execute(self.backend.stmt_mark_awaited, {"job_id": job_id})
            yield finished

    def close(self) -> None:
        self._finished.close()
        super().close()


def detached(raw: PoolProxiedConnection) -> Any:
    """The driver's connection under `raw`, taken out of the pool for good (LISTEN needs
    one of its own). Typed Any: psycopg's sync or async connection, as the engine is."""
    driver = raw.driver_connection
    if driver is None:  # SQLAlchemy's type allows it; a connection just checked out has one
        raise RuntimeError("the pool handed out a closed connection")
    raw.detach()
    return driver


def psycopg_url(bind: str | URL) -> URL:
    """The DSN with psycopg 3 as its driver when it names none."""
    url = make_url(bind)
    return url.set(drivername="postgresql+psycopg") if url.drivername == "postgresql" else url


def engine_arguments(bind: str | URL, options: dict[str, Any]) -> tuple[URL, dict[str, Any]]:
    """The URL and engine options for `bind`, with the DSN's psycopg options (below)
    moved into the options' `connect_args`."""
    url, connect_args = driver_options(psycopg_url(bind))
    if connect_args:
        options = {**options, "connect_args": {**options.get("connect_args", {}), **connect_args}}
    return url, options


def driver_options(url: URL) -> tuple[URL, dict[str, Any]]:
    """The DSN without the query parameters that are psycopg's own rather than libpq's,
    and those as psycopg's connect arguments. One so far: `prepare_threshold` (R34).
    psycopg prepares a statement on the server once it ran it that many times; a
    transaction-mode pooler (PgBouncer before 1.21) hands the next transaction another
    server connection, which lacks it or has another under the same name. Behind such a
    pooler write `?prepare_threshold=none`: nothing is ever prepared."""
    raw = url.query.get(PREPARE_THRESHOLD)
    if raw is None:
        return url, {}
    said = raw[-1] if isinstance(raw, tuple) else raw
    if said.strip().lower() in ("none", "off", "never"):
        threshold: int | None = None
    elif said.strip().isdigit():
        threshold = int(said)
    else:
        raise ValueError(
            f"{PREPARE_THRESHOLD}={said!r} in the DSN: write a count of runs (psycopg's "
            f"default is 5), or none to never prepare (behind PgBouncer in transaction mode)"
        )
    stripped = url.difference_update_query([PREPARE_THRESHOLD])
    return stripped, {PREPARE_THRESHOLD: threshold}


class Notifications:
    """LISTEN on a connection taken out of the pool for good: a pooled one would go back
    to other work between transactions and stop hearing anything."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        raw = engine.raw_connection()
        raw.rollback()
        self._conn: psycopg.Connection[Any] = detached(raw)
        self._conn.autocommit = True
        self._conn.execute(f"LISTEN {CHANNEL}")
        self._conn.execute(f"LISTEN {CANCEL_CHANNEL}")
        self._cancelled: list[int] = []

    def reaches_itself(self, timeout: float) -> bool:
        """A NOTIFY sent through the pool, the way enqueue sends one, must come back here.
        Behind a transaction-mode pooler (PgBouncer) LISTEN is silently lost: it does not."""
        probe = f"probe:{secrets.token_hex(8)}"
        with self._engine.begin() as conn:
            conn.execute(NOTIFY, {"payload": probe})
        return any(n.payload == probe for n in self._conn.notifies(timeout=timeout))

    def wait(self, timeout: float) -> list[str]:
        names = []
        for note in self._conn.notifies(timeout=timeout, stop_after=1):
            if note.channel == CANCEL_CHANNEL:
                self._cancelled.append(int(note.payload))
            else:
                names.append(note.payload)
        return names

    def cancelled(self) -> list[int]:
        """The jobs whose cancel was heard since the last call (W9)."""
        heard, self._cancelled = self._cancelled, []
        return heard

    def close(self) -> None:
        self._conn.close()


class Finished:
    """What one `wait()` sleeps on: set when the trigger says its job finished."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.event.wait(seconds)


class FinishedListener:
    """One LISTEN connection, out of the pool, shared by every `wait()` of one queue: a
    thread reads the trigger's notifications and wakes the waiters of each job. Started
    by the first waiter; when its connection fails it ends, the waiters poll on, and the
    next waiter starts it again."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._waiters: dict[int, list[Finished]] = {}
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False

    @contextmanager
    def watching(self, job_id: int) -> Iterator[Finished]:
        finished = Finished()
        with self._lock:
            self._waiters.setdefault(job_id, []).append(finished)
            if self._conn is None and not self._closed:
                try:
                    self._start()  # LISTEN has run when this returns
                except Exception as exc:  # the waiter polls; the next one tries again
                    log.warning("wait() cannot LISTEN (%s); polling", exc)
        try:
            yield finished
        finally:
            with self._lock:
                self._waiters[job_id].remove(finished)
                if not self._waiters[job_id]:
                    del self._waiters[job_id]

    def _start(self) -> None:
        raw = self._engine.raw_connection()
        raw.rollback()
        conn: psycopg.Connection[Any] = detached(raw)
        conn.autocommit = True
        conn.execute(f"LISTEN {FINISHED_CHANNEL}")
        self._conn = conn
        threading.Thread(
            target=self._read, args=(conn,), name="queuecore-wait", daemon=True
        ).start()

    def _read(self, conn: psycopg.Connection[Any]) -> None:
        try:
            while not self._closed:
                for note in conn.notifies(timeout=LISTEN_SLICE, stop_after=1):
                    with self._lock:
                        waiters = list(self._waiters.get(int(note.payload), ()))
                    for finished in waiters:
                        finished.event.set()
        except Exception:  # a lost connection: waiters poll, the next one listens again
            pass
        finally:
            with self._lock:
                if self._conn is conn:
                    self._conn = None
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True


#: The plan nodes that sort what they read.
SORT_NODES = ("Sort", "Incremental Sort")


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an `EXPLAIN (FORMAT JSON)` plan, from `node` down."""
    yield node
    for child in node.get("Plans", ()):
        yield from plan_nodes(child)


def _plan_sorts(rows: list[tuple[Any, ...]]) -> bool:
    """Whether an `EXPLAIN (FORMAT JSON)` answer has a sort anywhere in its plan."""
    ((document,),) = rows
    return any(node["Node Type"] in SORT_NODES for node in plan_nodes(document[0]["Plan"]))


def _run(conn: Any, sql: str, params: Any) -> Outcome:
    cursor = conn.execute(sql, params)
    if cursor.description is None:
        return cursor.rowcount, [], ()
    return cursor.rowcount, cursor.fetchall(), tuple(c.type_code for c in cursor.description)


#: Checked by mypy: the class the entry point names keeps the contract (`BackendClass`).
_AS_REGISTERED: BackendClass = PostgresQueue
