"""What a backend gives the conformance kit so that the whole suite runs on it.

A backend's package registers a `Harness` subclass under the `queuecore.harnesses` entry
point group, by the name its tests are to be known by (`sqlite = "pkg.mod:MyHarness"`);
`pytest --pyargs queuecore.conformance --queuecore-backends NAME` then runs every test on
it. The in-tree backends register theirs the same way (`backends/*_harness.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa

ENTRY_POINTS = "queuecore.harnesses"


#: How `Plan.indexes` names a read by primary key, whatever the database calls it.
PRIMARY_KEY = "primary key"


@dataclass(frozen=True)
class Plan:
    """What R19's tests read of a query plan (`Harness.explain`)."""

    indexes: frozenset[str]  # every index the plan reads the jobs table through
    full_scan: bool  # the jobs table is read row by row
    sorts: bool  # results are sorted after reading, instead of read in index order


class Unavailable(RuntimeError):
    """The harness cannot run here (no server, say): its tests are skipped, or fail when
    the run requires the backend (`--queuecore-require`)."""


class Harness:
    """One backend's test databases, for one pytest session.

    The kit calls `start` once before the first test that needs it, `fresh` for every
    test that opens a queue, and `stop` at the end of the session."""

    #: The backend's name in test ids (`test_x[sqlite-sync]`), and what tests may branch on
    #: where they check what only that database does (its query plans, say).
    name: ClassVar[str]
    #: What the database can do that some tests need; a test for a capability a harness
    #: does not declare is skipped for it and listed in the run's summary.
    #: - "listen": the queue can be listened to (`listen()`, R26; PostgreSQL's
    #:   LISTEN/NOTIFY): an enqueue wakes a worker and a finished job its waiter;
    #: - "migrates_on_connect": `connect` migrates a database that has no schema (the
    #:   embedded default, SQLite's); without it `connect` refuses and says to migrate;
    #: - "single_writer": one write lock serialises every write (SQLite's; a test
    #:   takes it with BEGIN IMMEDIATE); without it writers lock rows;
    #: - "shared_chain": the schema is built by the revisions SQLite and PostgreSQL
    #:   share (migrations/versions), whose earlier ones R28's test upgrades from. A
    #:   backend with a chain of its own has no earlier revision until it adds one.
    capabilities: ClassVar[frozenset[str]] = frozenset()

    #: Where the queue's default clock is the database server's (R20): a piece of SQL
    #: that every statement reading that clock carries, so a test can see the client
    #: sent no time of its own. None where the default clock is the local one.
    server_clock_sql: ClassVar[str | None] = None

    #: The indexes a read of the rows of one kind may go through, by role ("live",
    #: "running", "done", "dead", "cancelled"), where the backend's migrations build
    #: others than the shared ones (R16, R19's plan checks, the dashboard's). The claim
    #: itself must read `ix_queuecore_jobs_ready` (or `_by_queue`) on every backend.
    index_names: ClassVar[dict[str, frozenset[str]]] = {
        "live": frozenset({"ix_queuecore_jobs_ready", "ix_queuecore_jobs_ready_by_queue"}),
        "running": frozenset(
            {
                "ix_queuecore_jobs_ready",
                "ix_queuecore_jobs_ready_by_queue",
                "ix_queuecore_jobs_leases",
            }
        ),
        "done": frozenset({"ix_queuecore_jobs_done"}),
        "dead": frozenset({"ix_queuecore_jobs_dead"}),
        "cancelled": frozenset({"ix_queuecore_jobs_cancelled"}),
    }

    def start(self, scratch: Path) -> None:
        """Get a database server (or raise `Unavailable`) and whatever `fresh` copies or
        reuses: `scratch` is a folder of the session's own."""

    def fresh(self, scratch: Path) -> str:
        """A DSN of a migrated database holding no jobs (ids starting again at 1) that no
        other test uses until this one ends; `scratch` is the test's own folder."""
        raise NotImplementedError

    def unmigrated(self, scratch: Path) -> str:
        """A DSN of a database that was never migrated."""
        raise NotImplementedError

    def unreachable(self, scratch: Path) -> str:
        """A DSN of this backend that cannot be opened (no server there, or a folder
        that does not exist), for R22's message."""
        raise NotImplementedError

    def engine(self, dsn: str) -> sa.Engine:
        """A plain engine on `dsn`, for the tests that read rows behind the queue's back."""
        return sa.create_engine(dsn)

    def server_now(self, engine: sa.Engine) -> float:
        """What the queue's default clock reads now, in epoch seconds: the server's clock
        read through `engine` where `server_clock_sql` is set, else the local one."""
        return time.time()

    def explain(self, conn: sa.Connection, sql: str, parameters: Any) -> Plan:
        """The plan of `sql` (as the driver is sent it, with its parameters): which indexes
        it reads the jobs table through, whether it scans the table or sorts."""
        raise NotImplementedError

    def analyze(self, conn: sa.Connection) -> None:
        """Bring the planner's statistics of the jobs table up to date."""
        conn.exec_driver_sql("ANALYZE queuecore_jobs")

    def stop(self) -> None:
        """Drop what `start`, `fresh` and `unmigrated` made."""

    def describe(self) -> str | None:
        """A line for the run's header or summary (which server, which driver)."""
        return None


def harness_classes() -> dict[str, type[Harness]]:
    """Every installed harness, by name."""
    found: dict[str, type[Harness]] = {}
    for point in entry_points(group=ENTRY_POINTS):
        loaded: Any = point.load()
        if not (isinstance(loaded, type) and issubclass(loaded, Harness)):
            raise TypeError(f"entry point {point.name} = {point.value} is not a Harness class")
        found[point.name] = loaded
    return found
