"""MariaDB (10.5 and newer): many hosts, through mysqlclient by default (ADR 0012).

What differs from the shared statements, each said once by a `Backend` flag: a locking
scan locks every row it walks past, so the claim goes in steps (`queuecore.core.claim_steps`);
there is no UPDATE … RETURNING, no ON CONFLICT DO NOTHING (a dedupe key is taken in a
savepoint), no partial index (the claim walks the generated column `live_priority`,
migrations/mariadb), and no write may read its own table in a subquery. There is no
LISTEN either: idle workers and `wait()` poll. Claims that keep meeting each other take
turns (`ClaimTurns`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import URL, Connection, Double, Engine, Integer, MetaData, event, make_url
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ColumnElement

from queuecore.contract import Backend, BackendClass
from queuecore.core.dsn import shown
from queuecore.core.options import NoOptions
from queuecore.core.plans import DriverStep, Outcome, RunOnDriver
from queuecore.errors import (
    DatabaseLimitError,
    QueuecoreError,
    StorageFullError,
    UnknownBackendError,
)
from queuecore.executors.sqlqueue import SQLQueue
from queuecore.sql.schema import jobs
from queuecore.sql.statements import Walk

from . import mariadb_schema

#: MariaDB's errors: a unique key taken; a deadlock broken; a lock waited for too long.
DUPLICATE_ENTRY, DEADLOCK, LOCK_WAIT_TIMEOUT = 1062, 1213, 1205
#: ER_DISK_FULL, ER_RECORD_FILE_FULL ("The table is full"), ER_DISK_FULL_NOWAIT.
FULL = (1021, 1114, 1712)
#: EE_WRITE, ER_ERROR_ON_WRITE, ER_GET_ERRNO, ER_ERROR_ON_CLOSE: a full disk when errno is 28.
OS_ERRORS = (3, 1026, 1030, 1034)
ENOSPC_TEXT = re.compile(r"\b28\b|No space left")
#: ER_DATA_TOO_LONG, ER_NET_PACKET_TOO_LARGE, ER_TOO_BIG_ROWSIZE, ER_TOO_LONG_KEY,
#: ER_WARN_DATA_OUT_OF_RANGE; and ER_CONSTRAINT_FAILED of a JSON column's JSON_VALID
#: check, which fails past MariaDB's depth.
LIMITS = (1406, 1153, 1118, 1071, 1264)
CONSTRAINT_FAILED = 4025
JSON_CHECK = re.compile(r"CONSTRAINT `?[\w.]*\b(payload|result)`? failed")
DEDUPE_KEY = "uq_queuecore_jobs_dedupe_key"
MIGRATION_LOCK = "queuecore_migrate"
#: How long a migration waits for another process's to finish (GET_LOCK's seconds).
MIGRATION_LOCK_SECONDS = 600

#: The generated column the claim walks: a live row's priority, NULL for a finished one.
LIVE_PRIORITY: ColumnElement[int] = sa.column("live_priority", Integer)

#: The claim's turn: a named lock of the server's, one per database (the server's names
#: are shared by all its databases; it takes 64 characters at most).
TURN = "LEFT(CONCAT('queuecore_claim:', COALESCE(DATABASE(), '')), 64)"

_NEXT_ID = sa.text(
    "SELECT AUTO_INCREMENT FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :table"
)


class ClaimTurns:
    """Claims of one database that keep having to read again take turns
    (`claim_steps.Contention`): a claim holds a named lock (GET_LOCK) from before its
    transaction to after its commit.

    Every claim reads the same head of the queue; large claims side by side (a busy
    worker's batches) found what they read held or taken by another, margin and all,
    and read on, round after round: four worker processes drained about half of what
    one did, at twice the server's CPU a job (issue 29). In turns, each claim reads the
    head the one before it left, once.

    The turn is a courtesy, not a rule: the claim's own row locks keep R05 and R06. A
    claim that waited `wait_seconds` for it (its holder stopped while holding it, or
    more claims at once than turns can serve) claims without it, and this queue's
    claims do not ask for it for `rest_seconds`, as before turns."""

    #: Long enough for the claims of a few busy workers queued ahead on a loaded host
    #: (50 ms was not, on two cores: four processes fell back to claiming side by side).
    wait_seconds: float = 0.25
    rest_seconds: float = 10.0

    def __init__(self) -> None:
        self._resume_at = 0.0

    def take(self, cursor: Any) -> bool:
        """Wait for the turn; False when it did not come (then claim without it)."""
        if time.monotonic() < self._resume_at:
            return False
        cursor.execute(f"SELECT GET_LOCK({TURN}, {float(self.wait_seconds)!r})")
        (got,) = cursor.fetchone()
        if got != 1:
            self._resume_at = time.monotonic() + self.rest_seconds
        return bool(got == 1)

    def give_back(self, cursor: Any) -> None:
        cursor.execute(f"DO RELEASE_LOCK({TURN})")


class MariaDBBackend(Backend):
    """Reports in autocommit, one statement each; a heartbeat is its UPDATE and the read
    of the lease's end, in one transaction. Claims may take turns (`turns`)."""

    insert = staticmethod(mysql.insert)
    locks_rows_it_walks_past = True
    skips_conflicting_inserts = False
    writes_read_own_table = False

    def __init__(self, dialect: Dialect) -> None:
        super().__init__(dialect)
        self.turns = ClaimTurns()

    def server_now(self) -> ColumnElement[float]:
        """The server's clock, fixed for the whole statement (NOW(6) is), as a DOUBLE:
        workers on several hosts share it (R20). Every connection of the queue reads it
        in UTC (`utc_sessions`), where no local hour repeats."""
        return sa.literal_column("(UNIX_TIMESTAMP(NOW(6)) + 0e0)", Double)

    def walk(self) -> Walk:
        """The index (live_priority, visible_at, id) from its first non-NULL entry: the
        live rows in claim order; the finished ones, all NULL, sit before them unread."""
        return Walk(LIVE_PRIORITY.is_not(None), (LIVE_PRIORITY, jobs.c.visible_at, jobs.c.id))

    def failure(self, error: Exception) -> type[QueuecoreError] | None:
        """A full disk is ER_DISK_FULL, a table full (InnoDB's tablespace could not grow),
        or an OS write error 28 (ENOSPC); the limits are a value too long for its column or
        a JSON check (depth), a packet past max_allowed_packet, a row too large."""
        code = _code(error)
        if code in FULL or (code in OS_ERRORS and ENOSPC_TEXT.search(str(error))):
            return StorageFullError
        if code in LIMITS or (code == CONSTRAINT_FAILED and JSON_CHECK.search(str(error))):
            return DatabaseLimitError
        return None

    def rolled_back(self, error: Exception) -> bool:
        """A deadlock rolls the transaction back; a lock wait timeout only its statement,
        and the queue's transaction then rolls back the rest (nothing is committed)."""
        return _code(error) in (DEADLOCK, LOCK_WAIT_TIMEOUT)

    def is_duplicate_key(self, error: Exception) -> bool:
        return _code(error) == DUPLICATE_ENTRY and DEDUPE_KEY in str(getattr(error, "orig", error))

    def prepare_hot_connection(self, conn: Any) -> None:
        """Autocommit: a single statement is its own transaction, in one round trip."""
        autocommit = conn.autocommit
        if callable(autocommit):  # mysqlclient and PyMySQL: a method
            autocommit(True)
        else:  # MariaDB Connector/Python: an attribute
            conn.autocommit = True

    def run_on_driver(self, conn: Any, steps: Sequence[DriverStep]) -> list[Outcome]:
        if len(steps) == 1:
            cursor = conn.cursor()
            try:
                return [_run(cursor, *steps[0])]
            finally:
                cursor.close()
        with self.transaction_on_driver(conn) as run:
            return [run(sql, params) for sql, params in steps]

    @contextmanager
    def transaction_on_driver(self, conn: Any, *, turn: bool = False) -> Iterator[RunOnDriver]:
        """BEGIN on the autocommit connection; COMMIT, or a rollback on any error. A
        claim told to take a `turn` waits for it first, and gives it back once it has
        committed."""
        cursor = conn.cursor()
        in_turn = False
        try:
            in_turn = turn and self.turns.take(cursor)
            cursor.execute("BEGIN")
            try:
                yield lambda sql, params: _run(cursor, sql, params)
                cursor.execute("COMMIT")
            except BaseException:
                with suppress(Exception):  # a connection that died: its error is the one
                    conn.rollback()
                raise
        finally:
            try:
                if in_turn:
                    with suppress(Exception):  # a dead connection's lock ends with it
                        self.turns.give_back(cursor)
            finally:
                cursor.close()


class MariaDBQueue(SQLQueue):
    """MariaDB: the engine (READ COMMITTED, UTC sessions), the AUTO_INCREMENT counter, and
    the migration chain of its own."""

    backend_class = MariaDBBackend
    migration_chain: ClassVar[str] = "mariadb"
    metadata: ClassVar[MetaData] = mariadb_schema.metadata

    def __init__(self, bind: str | URL | Engine, **options: Any) -> None:
        super().__init__(bind, **options)
        try:
            refuse_mysql(self.engine)
        except UnknownBackendError:
            self.close()
            raise

    @classmethod
    def create_engine(
        cls, bind: str | URL | Engine, options: NoOptions = NoOptions(), **pool: Any
    ) -> Engine:
        """READ COMMITTED, as on PostgreSQL: every statement of a transaction reads what
        was committed before it, and no gap locks hold up other sessions' inserts.
        MariaDB has no options of its own; `pool` are SQLAlchemy's."""
        if isinstance(bind, Engine):
            utc_sessions(bind)
            return bind
        url = make_url(bind)
        if "charset" not in url.query:  # text is utf8mb4, as the table's columns are
            url = url.update_query_dict({"charset": "utf8mb4"})
        pool.setdefault("isolation_level", "READ COMMITTED")
        pool.setdefault("pool_recycle", 3600)  # below the server's wait_timeout
        try:
            engine = sa.create_engine(url, **pool)
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                f"{exc}; the MariaDB backend needs a driver: pip install 'queuecore[mariadb]' "
                "(mysqlclient), or write the DSN as mariadb+pymysql://... with PyMySQL"
            ) from exc
        utc_sessions(engine)
        return engine

    @classmethod
    def id_sequence(cls, conn: Connection) -> int:
        """The table's AUTO_INCREMENT is the next id: the last handed out is one less."""
        next_id = conn.execute(_NEXT_ID, {"table": jobs.name}).scalar()
        return max(int(next_id or 1) - 1, 0)

    @classmethod
    def advance_id_sequence(cls, conn: Connection, at_least: int) -> None:
        """An ALTER TABLE, which MariaDB commits on its own, whatever `conn` has open."""
        if at_least >= 1 and cls.id_sequence(conn) < at_least:
            conn.exec_driver_sql(f"ALTER TABLE {jobs.name} AUTO_INCREMENT = {int(at_least) + 1}")

    @classmethod
    @contextmanager
    def migrating(cls, engine: Engine) -> Iterator[None]:
        """A lock of a session of its own, not of a transaction: MariaDB commits each DDL
        statement, and the lock must outlast every one of them and the version's commit."""
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            got = conn.execute(
                sa.text("SELECT GET_LOCK(:name, :seconds)"),
                {"name": MIGRATION_LOCK, "seconds": MIGRATION_LOCK_SECONDS},
            ).scalar()
            if got != 1:
                raise TimeoutError(
                    f"another process has been migrating this database for "
                    f"{MIGRATION_LOCK_SECONDS} s (the lock {MIGRATION_LOCK!r}); try again once "
                    "it has finished"
                )
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": MIGRATION_LOCK})


def refuse_mysql(engine: Engine) -> None:
    """After the engine's first connection (the dialect knows the server by then): a
    MySQL server behind a mysql:// DSN is not one this backend can run on."""
    if not getattr(engine.dialect, "is_mariadb", False):
        raise UnknownBackendError(
            f"{shown(engine.url)} is a MySQL server, not "
            "MariaDB: queuecore's backend needs MariaDB 10.5 or newer (INSERT … RETURNING, "
            "SKIP LOCKED)"
        )


def utc_sessions(engine: Engine) -> None:
    """Every new connection reads NOW() in UTC: UNIX_TIMESTAMP converts it back through the
    session's time zone, which in a zone with daylight saving time is ambiguous for the
    hour that repeats in autumn. A caller's engine gets it on its new connections."""

    @event.listens_for(engine, "connect")
    def _utc(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("SET time_zone = '+00:00'")
        cursor.close()


def _code(error: Exception) -> int | None:
    """The server's error number under SQLAlchemy's wrapper (every driver puts it first)."""
    args = getattr(getattr(error, "orig", error), "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _run(cursor: Any, sql: str, params: Any) -> Outcome:
    cursor.execute(sql, params)
    if cursor.description is None:
        return cursor.rowcount, [], ()
    rows = cursor.fetchall()
    return len(rows), list(rows), tuple(column[1] for column in cursor.description)


#: Checked by mypy: the class the entry point names keeps the contract (`BackendClass`).
_AS_REGISTERED: BackendClass = MariaDBQueue
