"""R30: the database failures a user meets are queuecore errors that say what happened,
with the driver's error as `__cause__`: each backend's driver errors for a full disk and
for a limit of the database's own, a connection that stays lost through the retries, a
deadlock that comes back on every try. (A real full disk: test_disk_full.py.)"""

from __future__ import annotations

import importlib
import sqlite3

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.executors import reconnect
from queuecore.executors.reconnect import LOST


def driver_errors(backend: str) -> list[tuple[Exception, type[Exception] | None]]:
    """(a driver's error, the queuecore error it means) as each driver raises them."""
    if backend == "sqlite":
        return [
            (sqlite3.OperationalError("database or disk is full"), queuecore.StorageFullError),
            (sqlite3.DataError("string or blob too big"), queuecore.DatabaseLimitError),
            (sqlite3.OperationalError("no such table: x"), None),
        ]
    if backend == "postgresql":
        import psycopg

        return [
            (psycopg.errors.DiskFull("could not extend file"), queuecore.StorageFullError),
            (psycopg.errors.ProgramLimitExceeded("index row size"), queuecore.DatabaseLimitError),
            (psycopg.errors.UndefinedTable("no such table"), None),
        ]
    from queuecore.backends.mariadb_harness import DRIVER

    # The driver the MariaDB half runs on: each raises errors of its own classes.
    MySQLdb = importlib.import_module("MySQLdb" if DRIVER == "mysqldb" else "pymysql")
    full_write = "Error writing file './test/x.ibd' (Errcode: 28 \"No space left on device\")"
    return [
        (MySQLdb.OperationalError(1021, "Disk full (/tmp/x); waiting"), queuecore.StorageFullError),
        (
            MySQLdb.OperationalError(1114, "The table 'queuecore_jobs' is full"),
            queuecore.StorageFullError,
        ),
        (MySQLdb.OperationalError(3, full_write), queuecore.StorageFullError),
        (
            MySQLdb.OperationalError(1153, "Got a packet bigger than 'max_allowed_packet'"),
            queuecore.DatabaseLimitError,
        ),
        (
            MySQLdb.OperationalError(4025, "CONSTRAINT `queuecore_jobs.payload` failed for `t`"),
            queuecore.DatabaseLimitError,
        ),
        (MySQLdb.OperationalError(4025, "CONSTRAINT `ck_queuecore_jobs_state` failed"), None),
        (MySQLdb.OperationalError(3, 'Error writing file (Errcode: 5 "I/O error")'), None),
    ]


def wrapped(error: Exception) -> sa.exc.DBAPIError:
    return sa.exc.DBAPIError.instance("UPDATE x", {}, error, type(error).__mro__[1])


def test_r30_each_backend_says_which_driver_errors_are_a_full_disk_or_a_limit(backend, dsn):
    with queuecore.connect(dsn) as queue:
        for error, meaning in driver_errors(backend):
            assert queue.backend.failure(wrapped(error)) is meaning, error


def failing(queue: queuecore.Queue, error: sa.exc.DBAPIError, monkeypatch) -> None:
    """Every hot-path operation of `queue` fails with `error`; no pause between tries."""

    def execute(steps):
        raise error

    monkeypatch.setattr(queue.hot, "execute", execute)
    monkeypatch.setattr(reconnect, "PAUSES", (0.0, 0.0))


def test_r30_a_connection_lost_through_the_retries_is_a_connection_lost_error(
    tmp_path, monkeypatch
):
    with queuecore.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as queue:
        lost = wrapped(sqlite3.OperationalError("unable to open database file"))
        setattr(lost, LOST, "before commit")
        failing(queue, lost, monkeypatch)
        with pytest.raises(queuecore.ConnectionLostError, match="enqueue: the connection to") as e:
            queue.enqueue("k", {})
    assert e.value.__cause__ is lost
    assert isinstance(e.value, queuecore.DatabaseUnreachableError)


def test_r30_a_deadlock_on_every_try_is_a_deadlock_error(tmp_path, monkeypatch):
    with queuecore.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as queue:
        deadlock = wrapped(sqlite3.OperationalError("deadlock found"))
        failing(queue, deadlock, monkeypatch)
        monkeypatch.setattr(queue.backend, "rolled_back", lambda error: True)
        with pytest.raises(queuecore.DeadlockError, match=r"enqueue: .* on each of 3 tries") as e:
            queue.enqueue("k", {})
    assert e.value.__cause__ is deadlock


def test_r30_an_error_in_the_callers_transaction_is_said_the_same_way(tmp_path, monkeypatch):
    with queuecore.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as queue:
        full = wrapped(sqlite3.OperationalError("database or disk is full"))

        def enqueue(*args, **kwargs):
            raise full

        monkeypatch.setattr(queue.ops, "enqueue", enqueue)
        with queue.engine.begin() as conn, pytest.raises(queuecore.StorageFullError) as e:
            queue.enqueue("k", {}, conn=conn)
    assert e.value.__cause__ is full


def test_r30_a_purge_is_not_run_again_but_says_a_lost_connection_the_same_way(
    tmp_path, monkeypatch
):
    with queuecore.connect(f"sqlite:///{tmp_path / 'jobs.db'}") as queue:
        lost = wrapped(sqlite3.OperationalError("disk I/O error"))
        setattr(lost, LOST, "before commit")

        def purge(**options):
            raise lost

        monkeypatch.setattr(queue.ops, "purge", purge)
        with pytest.raises(queuecore.ConnectionLostError, match="purge: the connection") as e:
            queue.purge(older_than=0)
    assert e.value.__cause__ is lost
