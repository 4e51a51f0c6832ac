"""SQLite: one host, no set-up. Claims serialise on the database's write lock."""

from __future__ import annotations

import importlib
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy import URL, Engine, event, make_url
from sqlalchemy.dialects import sqlite

from queuecore.contract import Backend, BackendClass, QueueStatements
from queuecore.core.options import engine_option
from queuecore.core.plans import DriverStep, Hot, Outcome
from queuecore.core.sized import bucket, listed
from queuecore.errors import (
    DatabaseBusyError,
    DatabaseLimitError,
    QueuecoreError,
    SQLiteBuildWarning,
    StorageFullError,
)
from queuecore.executors.sqlqueue import SQLQueue
from queuecore.job import Completions
from queuecore.sql.schema import jobs

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPIConnection

    from queuecore.job import Job

_SEQUENCE_READ = sa.text("SELECT seq FROM sqlite_sequence WHERE name = :name")
_SEQUENCE_WRITE = sa.text("UPDATE sqlite_sequence SET seq = :seq WHERE name = :name")
_SEQUENCE_START = sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES (:name, :seq)")

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
SQLITE_BUSY = 5
T = TypeVar("T")

# The WAL-reset bug: fixed in 3.51.3, and the fix backported to these older lines.
WAL_RESET_FIXED = (3, 51, 3)
WAL_RESET_BACKPORTS: dict[tuple[int, ...], tuple[int, ...]] = {
    (3, 50): (3, 50, 7),
    (3, 44): (3, 44, 6),
}

# Drivers already reported, so a process that opens many queues warns once.
_warned_builds: set[tuple[str, tuple[int, ...]]] = set()


def has_wal_reset_fix(version: tuple[int, ...]) -> bool:
    """Whether an SQLite library of this version carries the WAL-reset fix."""
    if version >= WAL_RESET_FIXED:
        return True
    backport = WAL_RESET_BACKPORTS.get(tuple(version[:2]))
    return backport is not None and version >= backport


DRIVER_ENV = "QUEUECORE_SQLITE_DRIVER"
#: Tried in this order when the caller names no driver: the first with the fix is used.
FIXED_CANDIDATES = ("pysqlite3", "sqlite3")


def _warn_if_unfixed(driver: str, dbapi: SQLiteModule, *, callers_engine: bool) -> None:
    version = tuple(dbapi.sqlite_version_info)
    if has_wal_reset_fix(version) or (driver, version) in _warned_builds:
        return
    _warned_builds.add((driver, version))
    where = getattr(importlib.import_module(driver), "__file__", None) or "built in"
    if callers_engine:
        fix = (
            "Make your engine on a fixed one: pip install 'queuecore[pysqlite3]' and "
            "create_engine(url, module=pysqlite3.dbapi2), or give connect() the DSN."
        )
    else:
        fix = (
            "pip install 'queuecore[pysqlite3]' (a newer SQLite in a wheel); queuecore then "
            "uses it by itself."
        )
    warnings.warn(
        f"SQLite {dbapi.sqlite_version} from the {driver!r} module ({where}) lacks the fix "
        "for the WAL-reset bug (3.51.3, 3.50.7, 3.44.6): two connections writing or "
        f"checkpointing at once, a queue's pattern, can corrupt the database. {fix} To keep "
        f"this one and silence this warning: {DRIVER_ENV}={driver}.",
        SQLiteBuildWarning,
        stacklevel=4,
    )


def _load_driver(name: str) -> SQLiteModule:
    """The DB-API module of an sqlite3-compatible driver (the stdlib's or a fork of it)."""
    try:
        return importlib.import_module(f"{name}.dbapi2")
    except ModuleNotFoundError as exc:
        hint = " (pip install 'queuecore[pysqlite3]')" if name == "pysqlite3" else ""
        raise ModuleNotFoundError(f"sqlite_driver={name!r} is not installed{hint}: {exc}") from exc


def pick_driver(chosen: str | None) -> tuple[str, SQLiteModule, bool]:
    """(name, module, whether a person chose it): the option, else $QUEUECORE_SQLITE_DRIVER,
    else the first installed candidate whose SQLite has the WAL-reset fix, else the stdlib's.
    A person's choice is theirs: it is never second-guessed with a warning."""
    chosen = chosen or os.environ.get(DRIVER_ENV) or None
    if chosen is not None:
        return chosen, _load_driver(chosen), True
    for name in FIXED_CANDIDATES:
        try:
            dbapi = importlib.import_module(f"{name}.dbapi2")
        except ImportError:
            continue
        if has_wal_reset_fix(tuple(dbapi.sqlite_version_info)):
            return name, dbapi, False
    return "sqlite3", _load_driver("sqlite3"), False


def _is_busy(exc: BaseException) -> bool:
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == SQLITE_BUSY
    return "database is locked" in str(exc)


class SQLiteModule(Protocol):
    """What queuecore reads of an sqlite3-compatible DB-API module (the stdlib's sqlite3,
    pysqlite3): SQLAlchemy types a dialect's module only as far as PEP 249 goes."""

    __name__: str
    sqlite_version: str
    sqlite_version_info: tuple[int, int, int]

    @property
    def OperationalError(self) -> type[Exception]: ...

    def connect(self, database: str, *, timeout: float) -> Any: ...


SQLITE_FULL, SQLITE_TOOBIG = 13, 18


class _Patience:
    """What to do when SQLite answers SQLITE_BUSY.

    The busy timeout makes SQLite itself wait for the lock. A few cases come back at
    once instead (a WAL recovery in progress, a lock upgrade SQLite refuses to wait for):
    those are retried until the busy timeout has passed. Once it has, waiting longer would
    only hide a stuck writer, so the caller gets an error that says so."""

    def __init__(self, database: str | None, busy_timeout: float, dbapi: SQLiteModule) -> None:
        self.database = database
        self.busy_timeout = busy_timeout
        self.dbapi = dbapi

    def error(self, doing: str) -> DatabaseBusyError:
        return DatabaseBusyError(
            f"the SQLite database {self.database} stayed locked by another connection for "
            f"longer than busy_timeout={self.busy_timeout:g}s while {doing}. Some process holds "
            "a lock that long (a long write transaction, an exclusive lock, a restore into the "
            "file); find it, or pass a larger busy_timeout to queuecore.connect()."
        )

    def run(self, doing: str, step: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                return step()
            except self.dbapi.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise self.error(doing) from exc
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def application_engine(
    url: str | URL, *, sqlite_driver: str | None = None, **options: Any
) -> Engine:
    """A plain SQLAlchemy engine for the application, on the SQLite library a queue opened
    on the same DSN would use (`pick_driver`): the application's own transactions can then
    enqueue (`enqueue(conn=...)`), which a connection on another library is refused."""
    url = make_url(url)
    if url.get_backend_name() != "sqlite":
        raise ValueError(f"sqlite_engine() is for SQLite URLs (sqlite:///...), got {url!r}")
    driver, dbapi, chosen = pick_driver(sqlite_driver)
    if not chosen:
        _warn_if_unfixed(driver, dbapi, callers_engine=False)
    return sa.create_engine(url, module=dbapi, **options)


#: The smallest batch of completions sent as one statement (`complete_fenced`): 4 jobs
#: took 19-21 us each one statement a job, 23-26 us in one; 8 jobs about even; 32
#: jobs 10 us each against 7, 100 jobs 15-16 against 6.5 (a one-off timing, issue 29).
FENCES_AT_ONCE = 8


class SQLiteBackend(Backend):
    """SQLite's statements and its hot path's driver I/O, for the sync and the async queue.
    The hot path's connection runs its single statements in autocommit (which takes the
    write lock at its start, as BEGIN IMMEDIATE does) and its multi-statement steps
    between its own BEGIN IMMEDIATE and COMMIT."""

    migrates_on_connect = True
    insert = staticmethod(sqlite.insert)

    def __init__(
        self, dialect: sa.Dialect, *, busy_timeout: float, synchronous: str, patience: _Patience
    ) -> None:
        super().__init__(dialect)
        self.busy_timeout, self.synchronous, self.patience = busy_timeout, synchronous, patience

    def complete_fenced(self, ops: QueueStatements, batch: Sequence[Job]) -> Hot[Completions]:
        """One statement for the whole batch: its (id, token) pairs as a list of row
        values, bound at a few sizes (`queuecore.core.sized`). One statement a job cost
        the worker's ack window twice the time per job (issue 29). A small batch goes a
        statement a job, as does one that holds a job under two claims (the ids that
        come back could not say which claim passed): below FENCES_AT_ONCE jobs, the
        statement's list of row values costs more than it saves."""
        fences = {(job.id, job.lease_token) for job in batch}
        if len(batch) < FENCES_AT_ONCE or len({job_id for job_id, _ in fences}) < len(fences):
            return super().complete_fenced(ops, batch)
        size = bucket(len(batch))
        params = ops.params(
            **listed("job", [job.id for job in batch], size),
            **listed("token", [job.lease_token for job in batch], size),
        )
        compiled = ops.fences_statement(size)

        def finish(outcomes: list[Outcome]) -> Completions:
            passed = {row[0] for row in outcomes[0][1]}
            results = Completions()
            for job in batch:
                # The same claim listed twice completes once, as two calls to complete() would.
                results.append(job.id in passed)
                passed.discard(job.id)
            return results

        return Hot([(compiled, params)], finish)

    def check_callers_connection(self, conn: Any) -> None:
        """A caller's connection (`enqueue(conn=...)`) must run on the queue's SQLite library:
        two libraries on one file in one process do not see each other's locks and can
        corrupt it (sqlite.org/howtocorrupt.html, 2.2.1)."""
        theirs, ours = library(conn.dialect.loaded_dbapi), self.patience.dbapi
        if theirs is not ours:
            raise ValueError(
                f"this connection runs SQLite through {theirs.__name__}, the queue through "
                f"{ours.__name__}: two SQLite libraries on one file in one process can corrupt "
                "it. Make your engine with queuecore.sqlite_engine(url) instead of "
                "create_engine(url), use the queue's (queue.engine.begin()), or open the "
                "queue on yours: queuecore.connect(engine)"
            )

    def failure(self, error: Exception) -> type[QueuecoreError] | None:
        """SQLITE_FULL (13) is a full disk, or the file at its max_page_count; SQLITE_TOOBIG
        (18) a value past SQLITE_MAX_LENGTH. A driver without error codes says them."""
        orig = getattr(error, "orig", error)
        code = getattr(orig, "sqlite_errorcode", None)
        if code == SQLITE_FULL or "database or disk is full" in str(orig):
            return StorageFullError
        if code == SQLITE_TOOBIG or "string or blob too big" in str(orig):
            return DatabaseLimitError
        return None

    def prepare_hot_connection(self, conn: Any) -> None:
        conn.isolation_level = None
        _set_up(conn, self.busy_timeout, self.synchronous, self.patience)

    def run_on_driver(self, conn: Any, steps: Sequence[DriverStep]) -> list[Outcome]:
        """Either start is retried on an SQLITE_BUSY that came back at once, as the engine's
        BEGIN is: nothing has been written when it does."""
        cursor = conn.cursor()
        try:
            if len(steps) == 1:
                return [self.patience.run("writing", lambda: _run(cursor, *steps[0]))]
            self.patience.run(
                "waiting for the write lock (BEGIN IMMEDIATE)",
                lambda: cursor.execute("BEGIN IMMEDIATE"),
            )
            outcomes = [_run(cursor, sql, params) for sql, params in steps]
            cursor.execute("COMMIT")
            return outcomes
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        finally:
            cursor.close()


def library(dbapi: Any) -> SQLiteModule:
    """The SQLite module under a DB-API: itself, or the one SQLAlchemy's aiosqlite adapter wraps."""
    module: SQLiteModule = getattr(dbapi, "sqlite", dbapi)
    return module


def begin_immediately(engine: Engine, busy_timeout: float, mode: str, patience: _Patience) -> None:
    """Every write transaction of `engine` (a sync engine, or an async one's `sync_engine`)
    starts with BEGIN IMMEDIATE; one with the `queuecore_read_only` option with BEGIN."""

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        # Once per DBAPI connection (its pool record's info outlives each checkout).
        info = conn.connection.info
        # Typed as possibly None (a closed record); a connection that begins is open.
        driver_connection = cast("DBAPIConnection", conn.connection.dbapi_connection)
        if not info.get("queuecore_set_up"):
            _set_up(driver_connection, busy_timeout, mode, patience)
            info["queuecore_set_up"] = True
        cursor = driver_connection.cursor()
        if conn.get_execution_options().get("queuecore_read_only", False):
            cursor.execute("BEGIN")
            return
        patience.run(
            "waiting for the write lock (BEGIN IMMEDIATE)",
            lambda: cursor.execute("BEGIN IMMEDIATE"),
        )


@dataclass(frozen=True)
class SQLiteOptions:
    """The options only SQLite acts on (`connect(..., busy_timeout=5)`); every other
    backend accepts and ignores them.

    - `synchronous`: `"NORMAL"` (the default) survives any application crash; only a
      power loss can take the last commits. `"FULL"` survives that too, several times
      slower.
    - `busy_timeout`: how many seconds a write waits for the database's write lock
      before it fails with "database is locked".
    - `sqlite_driver`: the sqlite3-compatible module to open the file with; by default
      the first of pysqlite3 (which bundles a newer SQLite) and the stdlib's whose SQLite
      is fixed. It makes the engine: refused beside an Engine of your own.
    """

    synchronous: str = "NORMAL"
    busy_timeout: float = 30.0
    sqlite_driver: str | None = engine_option(None)

    def __post_init__(self) -> None:
        """Checked once, as they are given, before anything opens; `synchronous` is kept
        in the upper case its PRAGMA takes."""
        mode = str(self.synchronous).upper()
        if mode not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS}, got {self.synchronous!r}")
        if not self.busy_timeout > 0:
            raise ValueError(
                f"busy_timeout must be a positive number of seconds, got {self.busy_timeout!r}"
            )
        object.__setattr__(self, "synchronous", mode)


def refuse_in_memory(url: URL) -> None:
    """Workers in other processes must open the same database: a file."""
    if url.database in (None, "", ":memory:"):
        raise ValueError(
            "an in-memory SQLite database cannot be shared by workers; "
            "name a file, e.g. sqlite:///jobs.db"
        )


class SQLiteQueue(SQLQueue):
    """WAL mode; every write transaction starts with BEGIN IMMEDIATE, so it waits for the
    write lock up front (busy timeout) instead of failing with "database is locked" when
    it tries to upgrade a read lock halfway through.

    The queue's engine is an option copy (`Engine.execution_options`) of the one it was
    given or made: it shares that engine's pool, and its BEGIN hook is its own, so a
    caller's engine keeps its own transactions and pool settings untouched."""

    backend_class = SQLiteBackend
    backend_options = SQLiteOptions
    settings: SQLiteOptions

    @classmethod
    def create_engine(
        cls, bind: str | URL | Engine, options: SQLiteOptions = SQLiteOptions(), **pool: Any
    ) -> Engine:
        """The engine, with `options` (`SQLiteOptions`) and SQLAlchemy's `pool` options."""
        busy_timeout = options.busy_timeout
        url = bind.url if isinstance(bind, Engine) else make_url(bind)
        refuse_in_memory(url)
        if isinstance(bind, Engine):
            base = bind
            # The caller's engine is an SQLite one (the DSN chose this backend).
            dbapi = cast(SQLiteModule, bind.dialect.loaded_dbapi)
            driver = dbapi.__name__.split(".")[0]
            chosen = bool(os.environ.get(DRIVER_ENV))
        else:
            driver, dbapi, chosen = pick_driver(options.sqlite_driver)
            base = sa.create_engine(
                url, module=dbapi, connect_args={"timeout": busy_timeout}, **pool
            )
        if not chosen:
            _warn_if_unfixed(driver, dbapi, callers_engine=isinstance(bind, Engine))
        engine = base.execution_options(queuecore_sqlite=True)
        patience = _Patience(url.database, busy_timeout, dbapi)
        begin_immediately(engine, busy_timeout, options.synchronous, patience)
        return engine

    def make_backend(self) -> SQLiteBackend:
        dbapi = cast(SQLiteModule, self.engine.dialect.loaded_dbapi)  # made by create_engine
        busy_timeout = self.settings.busy_timeout
        patience = _Patience(str(self.engine.url.database), busy_timeout, dbapi)
        return SQLiteBackend(
            self.engine.dialect,
            busy_timeout=busy_timeout,
            synchronous=self.settings.synchronous,
            patience=patience,
        )

    @classmethod
    def id_sequence(cls, conn: sa.Connection) -> int:
        """AUTOINCREMENT keeps the largest id ever handed out in sqlite_sequence."""
        seq = conn.execute(_SEQUENCE_READ, {"name": jobs.name}).scalar()
        return int(seq or 0)

    @classmethod
    def advance_id_sequence(cls, conn: sa.Connection, at_least: int) -> None:
        if cls.id_sequence(conn) >= at_least:
            return
        if conn.execute(_SEQUENCE_WRITE, {"name": jobs.name, "seq": at_least}).rowcount == 0:
            conn.execute(_SEQUENCE_START, {"name": jobs.name, "seq": at_least})


def _set_up(driver_connection: Any, busy_timeout: float, mode: str, patience: _Patience) -> None:
    """What every connection of the queue needs once, outside any transaction."""
    cursor = driver_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    patience.run(
        "switching the database to WAL", lambda: cursor.execute("PRAGMA journal_mode = WAL")
    )
    cursor.execute(f"PRAGMA synchronous = {mode}")
    cursor.close()


def _run(cursor: Any, sql: str, params: Any) -> Outcome:
    # Fetch every row: an UPDATE ... RETURNING not read to the end keeps the write lock.
    cursor.execute(sql, params)
    rows = cursor.fetchall()
    if cursor.description is None:
        return cursor.rowcount, rows, ()
    return len(rows), rows, tuple(column[1] for column in cursor.description)


#: Checked by mypy: the class the entry point names keeps the contract (`BackendClass`).
_AS_REGISTERED: BackendClass = SQLiteQueue
