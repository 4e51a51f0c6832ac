"""The backend contract: everything a database's backend gives queuecore, in one place.

A backend is three things, each declared here:
- a `Backend`: what the database does differently, as statements and flags, shared by
  the sync and the async queue (*what* to send; the sync hot path's driver I/O,
  `run_on_driver`, is its last part);
- the queue class its entry point names, which satisfies `BackendClass`: an `SQLQueue`
  subclass that makes the engine, reads the id sequence, listens (a `Listener`), and
  wakes `wait()` early where it can (a `FinishSignal`);
- for `connect_async`, an `AsyncDriver` (with an `AsyncListener` and an
  `AsyncFinishSignal`), which the backend's `AsyncOpener` opens.

Backends are found through entry points, so a third-party backend plugs in the same way
ours do: the queue class under `queuecore.backends` (`backend_for`), its async opener
under `queuecore.async_drivers` (`async_driver_for`), so that a sync application never
imports the async side; the conformance kit's `Harness`
(`queuecore.conformance.harness`) is how it proves that it keeps the rules.
"""

from __future__ import annotations

import functools
from collections.abc import Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from importlib.metadata import EntryPoint, entry_points
from types import NotImplementedType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from sqlalchemy import URL, Connection, Engine, Insert, MetaData
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import ColumnElement

from queuecore.core.options import QueueOptions
from queuecore.core.plans import A, DriverStep, Hot, Outcome, RunOnDriver, Step, Tx
from queuecore.core.statistics import ClaimSortCheck
from queuecore.errors import QueuecoreError, UnknownBackendError
from queuecore.job import Completions
from queuecore.protocol import Queue
from queuecore.sql.compiled import Compiled
from queuecore.sql.statements import LIVE_WALK, Walk

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine  # needs greenlet: not for a sync queue

    from queuecore.core.operations import Operations
    from queuecore.job import Job


class QueueStatements(Protocol):
    """What a `Backend`'s hooks may use of its queue's statements (the core's `Operations`
    satisfies it): the clock expression, compiling, the parameters of one statement, the
    fenced completes of a batch in one statement, and the one slot a backend may fill
    (`hot_enqueue_many`, its one-statement batch insert)."""

    now_sql: ColumnElement[Any]
    hot_complete: Compiled
    hot_enqueue_many: Compiled | None

    def compile(self, statement: ClauseElement) -> Compiled: ...

    def params(self, **params: Any) -> dict[str, Any]: ...

    def fence(self, job: Job, **params: Any) -> dict[str, Any]: ...

    def fences_statement(self, count: int) -> Compiled: ...


class Backend:
    """The statement-level hooks of one database. One instance per queue (it may hold
    backend options, e.g. PostgreSQL's `notify`)."""

    #: Run migrations at connect when the schema is missing (the embedded default).
    migrates_on_connect: ClassVar[bool] = False
    #: The many-job claim's rows are put in claim order by their returned `ready_at`;
    #: else (SQLite) `statements.claim_order` lists the order first.
    returns_from_columns: ClassVar[bool] = False
    #: The longest pause between two looks of `wait()`: short where polling is all
    #: there is, longer where a notification wakes the waiter anyway.
    wait_pause_cap: ClassVar[float] = 0.5
    #: A locking read locks every row its scan walks past, not only those it returns
    #: (InnoDB): the claim then reads its candidates without locks first, and locks
    #: them by id (`queuecore.core.claim_steps`), so that it holds up no other job's report.
    locks_rows_it_walks_past: ClassVar[bool] = False
    #: `INSERT … ON CONFLICT DO NOTHING` exists: a taken dedupe key writes nothing and
    #: returns no id. Without it (MariaDB) the insert runs in a savepoint, rolled back
    #: when `is_duplicate_key` says the key was taken (R02, R27).
    skips_conflicting_inserts: ClassVar[bool] = True
    #: An UPDATE or DELETE may read its own table in a subquery (MariaDB refuses it:
    #: such reads then go through a derived table, or the write waits for locked rows).
    writes_read_own_table: ClassVar[bool] = True

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        #: UPDATE … RETURNING exists (SQLAlchemy's own flag for the dialect); without it the
        #: rows an update wrote are read back in the same transaction.
        self.update_returning: bool = dialect.update_returning

    @staticmethod
    def insert(table: Any) -> Any:
        """The dialect's INSERT construct (with `on_conflict_do_nothing` where
        `skips_conflicting_inserts`)."""
        raise NotImplementedError

    def walk(self) -> Walk:
        """How a claim walks the live rows in claim order: the columns of the index that
        holds them (a partial index where the database has them)."""
        return LIVE_WALK

    def rolled_back(self, error: Exception) -> bool:
        """Whether the server rolled the whole transaction back under `error` (a
        deadlock broken, a lock wait that ran out), so running it again is safe."""
        return False

    def failure(self, error: Exception) -> type[QueuecoreError] | None:
        """The queuecore error that a driver's error under `error` (SQLAlchemy's wrapper)
        means for the user (R30): `StorageFullError` for a full disk, `DatabaseLimitError`
        for a limit of the database's own; None for any other."""
        return None

    def is_duplicate_key(self, error: Exception) -> bool:
        """Whether a failed INSERT broke the dedupe key's unique constraint (needed only
        where the database cannot skip conflicting inserts)."""
        return False

    def server_now(self) -> ColumnElement[float] | None:
        """The database server's clock as SQL, or None where the local clock is the default."""
        return None

    def refresh_statistics(self) -> ClauseElement | None:
        """A statement that brings the planner's statistics of the jobs table up to date,
        run after a bulk load (`queuecore.copy`) and when a full claim's plan sorts
        (`claim_sort_check`), where a claim's plan depends on them; None where the
        database keeps them itself or its plans need none."""
        return None

    def claim_sort_check(self) -> ClaimSortCheck | None:
        """How to ask whether the claim's plan sorts what it reads
        (`queuecore.core.statistics`), where `refresh_statistics` would mend it."""
        return None

    def announcing(self, insert: Insert) -> ClauseElement:
        """The hot path's INSERT with `announce` folded into it, where the database can."""
        return insert

    def announce(self, queue: str) -> list[tuple[Any, dict[str, Any]]]:
        """Statements that wake idle workers of `queue` when the enqueuing transaction
        commits (W6). None where the database cannot notify: workers poll."""
        return []

    def announce_cancel(self, job_id: int) -> list[tuple[Any, dict[str, Any]]]:
        """Statements that tell the workers, when the cancelling transaction commits,
        that job `job_id` was cancelled (W9). None where the database cannot notify:
        workers holding jobs poll for it."""
        return []

    def build(self, ops: QueueStatements) -> None:
        """Add the backend's own statements to `ops` (called once, at the end of its set-up)."""

    def complete_fenced(self, ops: QueueStatements, batch: Sequence[Job]) -> Hot[Completions]:
        """Fenced completes of many jobs in one transaction (no effects): one statement
        per job; a backend may do it in one. One round: `finish` answers `complete_many`.
        Where an UPDATE returns no rows (MariaDB) the core does it instead, in two
        statements: the fences read under row locks, then one UPDATE by id."""
        steps = [(ops.hot_complete, ops.fence(job)) for job in batch]
        return Hot(steps, lambda outcomes: Completions(count == 1 for count, _, _ in outcomes))

    def check_callers_connection(self, conn: Any) -> None:
        """Refuse a caller's connection (`conn=`) the queue cannot share a transaction with."""

    # --- the sync hot path's driver I/O -------------------------------------------

    def prepare_hot_connection(self, conn: Any) -> None:
        """Set up a driver connection that the hot path owns (e.g. its transaction mode)."""

    def run_on_driver(self, conn: Any, steps: Sequence[DriverStep]) -> list[Outcome]:
        """Run the steps on the DBAPI connection: one step on its own (autocommit), several
        in one transaction that takes the write lock up front. Every row is fetched."""
        raise NotImplementedError

    def transaction_on_driver(
        self, conn: Any, *, turn: bool = False
    ) -> AbstractContextManager[RunOnDriver]:
        """A transaction on the DBAPI connection for a program whose later statements
        depend on the rows of earlier ones (`Tx.hot`: the claim in steps): the context
        gives what runs one statement in it, commits on the way out, and rolls back on
        an error. Needed where `locks_rows_it_walks_past`. `turn` (`Tx.turn`): a claim
        made while claims keep having to read again, which the backend may have wait
        for its turn."""
        raise NotImplementedError


# --- the queue class an entry point names -------------------------------------------


class BackendClass(Protocol):
    """What `connect`, `migrate` and `copy` need of a backend's class (the entry point's
    object): it makes queues, and it answers for the database before there is a queue.
    `SQLQueue` gives every attribute a default; a backend overrides what differs."""

    #: The options only this backend acts on (`connect(..., busy_timeout=...)`), declared
    #: once: a frozen dataclass whose fields are their names and defaults; a field made
    #: with `queuecore.core.options.engine_option` shapes the engine, and is refused
    #: beside a caller's own Engine. Every other backend accepts and ignores them, so
    #: configuration never branches on the DSN.
    backend_options: type[Any]
    #: The folder of `queuecore.migrations` whose revisions build this backend's schema.
    migration_chain: str
    #: The models those revisions build (what `queuecore migrate --check` compares).
    metadata: MetaData

    def __call__(self, bind: str | URL | Engine, **options: Any) -> Queue: ...

    def create_engine(self, bind: str | URL | Engine, options: Any, **pool: Any) -> Engine:
        """An engine set up for this database (pragmas, transaction start, pool), with
        its `options` (an instance of `backend_options`)."""
        ...

    def id_sequence(self, conn: Connection) -> int:
        """The last job id the table has handed out (0 before the first), purged ones too."""
        ...

    def advance_id_sequence(self, conn: Connection, at_least: int) -> None:
        """Make the next id the table hands out greater than `at_least` (never lower it)."""
        ...

    def migrating(self, engine: Engine) -> AbstractContextManager[object]:
        """Held while migrations run on `conn`: two processes migrating one database
        take turns."""
        ...


class FinishSignal(Protocol):
    """What `wait()` sleeps on between two looks at a job (`SQLQueue.finish_signal`)."""

    def sleep(self, seconds: float) -> None:
        """Return after `seconds`, or earlier when the job may have finished."""
        ...


class AsyncFinishSignal(Protocol):
    """`FinishSignal` for the async queue (`AsyncDriver.finish_signal`)."""

    async def sleep(self, seconds: float) -> None:
        """Return after `seconds`, or earlier when the job may have finished."""
        ...


# --- the async queue's driver ----------------------------------------------------------


class AsyncListener(Protocol):
    """`Listener` for the async queue (PostgreSQL LISTEN on an async connection)."""

    async def reaches_itself(self, timeout: float) -> bool: ...

    async def wait(self, timeout: float) -> list[str]: ...

    async def close(self) -> None: ...


class AsyncDriver(Protocol):
    """What a backend gives the async queue: its engine and the I/O that differs."""

    @property
    def engine(self) -> AsyncEngine: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def ops(self) -> Operations: ...

    async def execute(self, steps: Sequence[Step]) -> list[Outcome]:
        """The hot path: the steps in one transaction, every row fetched (`HotPath`)."""
        ...

    def finish_signal(self, job_id: int) -> AbstractAsyncContextManager[AsyncFinishSignal]:
        """What `wait()` sleeps on between two looks at the job."""
        ...

    async def listen(self) -> AsyncListener | None: ...

    async def run_blocking(self, tx: Tx[A]) -> A | NotImplementedType:
        """Run a transaction of the queue's own that calls no effect off the event loop
        with blocking I/O, where that is the better bridge (SQLite: on the hot path's
        thread, one hop instead of one per statement); NotImplemented: awaited here."""
        ...

    async def close(self) -> None: ...


# --- finding the backend for a DSN -----------------------------------------------------


class AsyncOpener(Protocol):
    """What the `queuecore.async_drivers` entry point names: it opens the async queue's
    driver for a URL, with the queue's own options, the backend's own (an instance of
    its queue class's `backend_options`) and the pool's."""

    def __call__(
        self, url: URL, queue: QueueOptions, options: Any, /, **pool: Any
    ) -> Coroutine[Any, Any, AsyncDriver]: ...


ENTRY_POINT_GROUP = "queuecore.backends"
ASYNC_ENTRY_POINT_GROUP = "queuecore.async_drivers"


@functools.cache
def _registered(group: str = ENTRY_POINT_GROUP) -> tuple[EntryPoint, ...]:
    """The group's entry points, read once per process: reading them opens every
    installed distribution's metadata, which cost more than half of a `connect()`
    (about 14 ms a read, several reads a connect, on a venv of 100 packages)."""
    return tuple(entry_points(group=group))


def backend_for(url: URL) -> BackendClass:
    """The backend class registered for the URL's dialect."""
    name = url.get_backend_name()
    found = [ep for ep in _registered() if ep.name == name]
    if not found:
        known = sorted(ep.name for ep in _registered())
        raise UnknownBackendError(
            f"no queuecore backend for the dialect {name!r}; installed backends: {known}"
        )
    backend: BackendClass = found[0].load()
    return backend


def async_driver_for(url: URL) -> AsyncOpener:
    """The async opener registered for the URL's dialect (`connect_async`)."""
    name = url.get_backend_name()
    found = [ep for ep in _registered(ASYNC_ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise UnknownBackendError(
            f"the queuecore backend for the dialect {name!r} has no async queue "
            f"(no entry point in the group {ASYNC_ENTRY_POINT_GROUP!r})"
        )
    opener: AsyncOpener = found[0].load()
    return opener


@functools.cache
def installed_backends() -> tuple[BackendClass, ...]:
    """Every backend that loads, so one's own options are known (and ignored) by the
    others; found once per process."""
    loaded: list[BackendClass] = []
    for ep in _registered():
        try:
            loaded.append(ep.load())
        except ImportError:  # a broken third-party backend must not break the others
            continue
    return tuple(loaded)
