"""The sync hot path: compiled statements on a DBAPI connection of the calling thread's own.

A pool checkout and return per statement cost as much as SQLite's work, so each thread
keeps one driver connection, detached from the pool so that many worker threads cannot
starve it (transactions with effects, and reads, still use the pool). It is dropped with
its thread, or in a forked child. The async queue on SQLite runs this same path on a
thread of its own, so both faces share the driver code and SQLite's busy handling.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, Engine, exc
from sqlalchemy.pool import PoolProxiedConnection

from queuecore.contract import Backend
from queuecore.core.plans import A, Outcome, Program, RunCompiled, RunOnDriver, Step
from queuecore.executors.reconnect import LOST, transaction

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPIConnection


#: Threads that keep no connection of their own (`connect_per_call`).
_per_call = threading.local()


def connect_per_call() -> None:
    """From now on, the calling thread's hot-path statements run on a pooled connection
    taken for the call and given back, not on one the thread keeps: for threads that
    write only now and then, and many of them (a worker's slots, whose handlers run in
    processes of their own). Kept, theirs would be one connection per slot, past the
    budget docs/how-to/many-hosts.md gives."""
    _per_call.on = True


class HotPath:
    def __init__(self, engine: Engine, backend: Backend) -> None:
        self.engine = engine
        self.backend = backend
        self._local = threading.local()
        self._connections: weakref.WeakSet[PoolProxiedConnection] = weakref.WeakSet()

    def connection(self) -> tuple[PoolProxiedConnection, Any]:
        """This thread's own (pool record, driver connection)."""
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == os.getpid():
            return held[1], held[2]
        raw = self.engine.raw_connection()
        raw.detach()
        # Typed as possibly None (a closed record); one just checked out is open.
        dbapi_connection = cast("DBAPIConnection", raw.dbapi_connection)
        driver = self.engine.dialect.get_driver_connection(dbapi_connection)
        self.backend.prepare_hot_connection(driver)
        self._local.held = (os.getpid(), raw, driver)
        self._connections.add(raw)
        return raw, driver

    def execute(self, steps: Sequence[Step]) -> list[Outcome]:
        """Run the steps in one transaction. Driver errors still surface as SQLAlchemy's; a
        lost connection is closed, replaced on the next call, and marked for `reconnecting`
        as lost while committing (a statement in autocommit may have landed): every
        hot-path operation is safe to run again. Through SQLAlchemy's Connection where
        `on_connection` says so."""
        if self.on_connection():
            with transaction(self.engine) as conn:
                return execute_on_connection(conn, steps)
        raw, driver = self._driver()
        try:
            driver_steps = [(c.sql, c.parameters(params)) for c, params in steps]
            outcomes = self.backend.run_on_driver(driver, driver_steps)
        except self.engine.dialect.loaded_dbapi.Error as error:
            raise self._failed(raw, error) from error
        return [
            (count, c.rows(rows, codes), codes)
            for (c, _), (count, rows, codes) in zip(steps, outcomes, strict=True)
        ]

    def run_program(self, body: Program[A], *, turn: bool = False) -> A:
        """A program that asks only `RunCompiled` (`Tx.hot`), in one transaction on this
        thread's driver connection (`Backend.transaction_on_driver`, told whether to wait
        for a claim's `turn`); errors, a lost connection and an instrumented engine as `execute` has
        them (through SQLAlchemy's Connection a claim waits for no turn). An error is not
        thrown into the program: the transaction is rolled back and the error raised."""
        if self.on_connection():
            with transaction(self.engine) as conn:
                return drive_compiled(body, lambda step: execute_on_connection(conn, (step,))[0])
        raw, driver = self._driver()

        def run(step: RunCompiled, on_driver: RunOnDriver) -> Outcome:
            compiled = step.compiled
            count, rows, codes = on_driver(compiled.sql, compiled.parameters(step.params))
            return count, compiled.rows(rows, codes), codes

        try:
            with self.backend.transaction_on_driver(driver, turn=turn) as on_driver:
                return drive_compiled(body, lambda step: run(step, on_driver))
        except self.engine.dialect.loaded_dbapi.Error as error:
            raise self._failed(raw, error) from error

    def on_connection(self) -> bool:
        """Whether this call goes through SQLAlchemy's Connection instead of the driver's:
        SQLAlchemy's cursor events cannot fire on the driver's, so an engine that has
        listeners for them (tracing, logging, tests that watch the SQL) gets the same
        statements through its Connection, events and all; so does a thread that keeps
        no connection (`connect_per_call`)."""
        return self.instrumented() or getattr(_per_call, "on", False)

    def _driver(self) -> tuple[PoolProxiedConnection, Any]:
        """This thread's driver connection; one that cannot be made raises as lost."""
        dialect = self.engine.dialect
        try:
            return self.connection()
        except dialect.loaded_dbapi.Error as error:
            # Unlike engine.connect(), the pool hands on the driver's own error: wrapped, so
            # that `reconnecting` and the worker know a connection that could not be made.
            unreachable = exc.DBAPIError.instance(
                None, None, error, dialect.loaded_dbapi.Error, dialect=dialect
            )
            setattr(unreachable, LOST, "before commit")
            raise unreachable from error

    def _failed(self, raw: PoolProxiedConnection, error: Any) -> exc.DBAPIError:
        """The driver's error as SQLAlchemy's; a lost connection is dropped first."""
        dialect = self.engine.dialect
        lost = dialect.is_disconnect(error, raw.dbapi_connection, None)
        if lost:
            self._local.held = None
            raw.invalidate(error)
        return lost_or_not(error, dialect, lost)

    def instrumented(self) -> bool:
        dispatch = self.engine.dispatch
        return bool(dispatch.before_cursor_execute or dispatch.after_cursor_execute)

    def close(self) -> None:
        for raw in list(self._connections):
            raw.close()


def lost_or_not(error: Exception, dialect: Any, lost: bool) -> exc.DBAPIError:
    """The driver's error as SQLAlchemy's, marked "during commit" when the connection died
    (a step in autocommit may have landed)."""
    # Typed as any StatementError: a driver's own error (an instance of its `Error`, as
    # here) always comes back as a DBAPIError subclass.
    wrapped = cast(
        exc.DBAPIError,
        exc.DBAPIError.instance(
            None,
            None,
            error,
            dialect.loaded_dbapi.Error,
            connection_invalidated=lost,
            dialect=dialect,
        ),
    )
    if lost:
        setattr(wrapped, LOST, "during commit")
    return wrapped


def drive_compiled(body: Program[A], run: Callable[[RunCompiled], Outcome]) -> A:
    """Answer each `RunCompiled` the program asks with `run`; its return value."""
    answer: Outcome | None = None
    while True:
        try:
            request = body.send(answer)
        except StopIteration as done:
            value: A = done.value  # the program's return value, typed Any by Python
            return value
        if type(request) is not RunCompiled:
            body.close()
            raise TypeError(f"not a request a hot program may make: {request!r}")
        answer = run(request)


def execute_on_connection(conn: Connection, steps: Sequence[Step]) -> list[Outcome]:
    """The hot path's statements through SQLAlchemy's Connection (events fire), in the
    connection's transaction. The async queue runs it through `AsyncConnection.run_sync`."""
    outcomes: list[Outcome] = []
    for compiled, params in steps:
        result = conn.exec_driver_sql(compiled.sql, compiled.parameters(params))
        if not result.returns_rows:
            outcomes.append((result.rowcount, [], ()))
            continue
        codes = tuple(column[1] for column in result.cursor.description)
        rows = result.all()
        outcomes.append((len(rows), compiled.rows(rows, codes), codes))
    return outcomes
