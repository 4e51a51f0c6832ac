"""One option set for every DSN (ADR 0009): the same call works on either backend, a
backend-only option means nothing elsewhere, a misspelt one is named before anything
connects, and an engine handed in stays the caller's."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import queuecore
from queuecore.cli.main import main

EVERY_OPTION = {
    "lease_seconds": 10,
    "max_attempts": 3,
    "backoff_base": 0.5,
    "backoff_cap": 5.0,
    "max_payload_bytes": 4096,
    "synchronous": "FULL",
    "busy_timeout": 5.0,
    "sqlite_driver": "sqlite3",
    "notify": False,
    "pool_size": 3,
    "pool_pre_ping": True,
}

# A DSN for each backend that nothing listens on: an option error must come first.
NOWHERE = {
    "sqlite": "sqlite:////nonexistent-folder-for-queuecore-tests/jobs.db",
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:1/queuecore",
}


def test_every_option_is_accepted_by_every_backend(dsn):
    with queuecore.connect(dsn, **EVERY_OPTION) as queue:
        job_id = queue.enqueue("a", {}).id
        [job] = queue.claim("w")
        assert (job.id, job.max_attempts) == (job_id, 3)
        assert queue.complete(job)
        assert queue.lease_seconds == 10


@pytest.mark.parametrize("backend", sorted(NOWHERE))
def test_a_misspelt_option_is_named_before_anything_connects(backend):
    with pytest.raises(TypeError) as caught:
        queuecore.connect(NOWHERE[backend], lease_second=10)
    assert str(caught.value).startswith(
        "connect() got an unknown option 'lease_second'; did you mean 'lease_seconds'?"
    )


@pytest.mark.parametrize("backend", sorted(NOWHERE))
def test_an_option_nobody_knows_lists_what_connect_takes(backend):
    with pytest.raises(TypeError, match=r"unknown option 'colour' \(it takes: .*notify"):
        queuecore.connect(NOWHERE[backend], colour="blue")


def test_backend_only_options_are_used_where_they_mean_something(tmp_path):
    with (
        queuecore.connect(f"sqlite:///{tmp_path / 'jobs.db'}", synchronous="FULL") as queue,
        queue.engine.begin() as conn,
    ):
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("synchronous", "SOMETIMES", r"synchronous must be one of \('OFF', 'NORMAL'"),
        ("busy_timeout", 0, "busy_timeout must be a positive number of seconds, got 0"),
    ],
)
@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_bad_sqlite_option_is_refused_before_the_file_is_made(
    tmp_path, option, value, message, face
):
    path = tmp_path / "jobs.db"
    dsn = f"sqlite:///{path}" if face == "sync" else f"sqlite+aiosqlite:///{path}"
    with pytest.raises(ValueError, match=message):
        if face == "sync":
            queuecore.connect(dsn, **{option: value})
        else:
            asyncio.run(_open_async(dsn, **{option: value}))
    assert not path.exists()


async def _open_async(dsn: str, **options: object) -> None:
    async with queuecore.connect_async(dsn, **options):
        pass


def test_synchronous_is_taken_in_either_case(tmp_path):
    with (
        queuecore.connect(f"sqlite:///{tmp_path / 'jobs.db'}", synchronous="full") as queue,
        queue.engine.begin() as conn,
    ):
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL


@pytest.mark.parametrize("dsn", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_sqlite_database_is_refused(dsn):
    with pytest.raises(ValueError, match="an in-memory SQLite database cannot be shared"):
        queuecore.connect(dsn)


def test_notify_false_is_kept_on_postgresql(dsn, backend):
    with queuecore.connect(dsn, notify=False) as queue:
        assert getattr(queue, "notify", False) is False
        if backend == "postgresql":
            assert queuecore.connect(dsn).notify is True


def test_every_command_takes_the_sqlite_driver_option_on_either_backend(dsn, capsys):
    assert main(["stats", "--dsn", dsn, "--sqlite-driver", "sqlite3", "--json"]) == 0
    assert '"queued": 0' in capsys.readouterr().out


def _engine(dsn: str) -> sa.Engine:
    """An application's own engine, with pool settings of its own (on SQLite, on the stdlib's
    sqlite3, whatever its build: the build warning is not what these tests look at)."""
    return sa.create_engine(dsn, pool_size=7, max_overflow=0)


@pytest.mark.filterwarnings("ignore::queuecore.SQLiteBuildWarning")
def test_connect_engine_uses_its_pool_and_never_disposes_it(dsn, backend):
    engine = _engine(dsn)
    pool = engine.pool
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    checked_in = pool.checkedin()
    queue = queuecore.connect(engine)
    assert queue.engine.pool is pool  # the caller's pool and its settings
    assert pool.size() == 7
    queue.enqueue("a", {})
    [job] = queue.claim("w")
    assert queue.complete(job)
    queue.close()
    assert engine.pool is pool, "close() disposed the caller's engine"
    assert pool.checkedin() >= checked_in
    with engine.connect() as conn:  # still the caller's, still working
        assert conn.exec_driver_sql("SELECT count(*) FROM queuecore_jobs").scalar() == 1
    engine.dispose()


@pytest.mark.filterwarnings("ignore::queuecore.SQLiteBuildWarning")
def test_connect_engine_leaves_the_callers_own_transactions_alone(dsn, backend):
    """The queue's BEGIN IMMEDIATE (SQLite) belongs to the queue's engine, not the caller's."""
    engine = _engine(dsn)
    begun: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: begun.append(a[2]))
    with queuecore.connect(engine) as queue:
        queue.enqueue("a", {})
        begun.clear()
        with engine.begin() as conn:
            conn.exec_driver_sql("SELECT 1")
    assert not any("IMMEDIATE" in sql for sql in begun)
    engine.dispose()


def test_a_queue_made_from_a_dsn_disposes_its_own_engine(dsn):
    queue = queuecore.connect(dsn)
    pool = queue.engine.pool
    queue.close()
    assert queue.engine.pool is not pool


@pytest.mark.parametrize("option", ["pool_size", "sqlite_driver"])
def test_engine_building_options_beside_an_engine_are_refused(tmp_path, option):
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(TypeError, match=f"an Engine and '{option}'.*your own create_engine"):
        queuecore.connect(engine, **{option: "pysqlite3" if option == "sqlite_driver" else 3})
    engine.dispose()


def test_a_connection_on_another_sqlite_library_is_refused_for_enqueue(tmp_path):
    """Two SQLite libraries on one file in one process can corrupt it: refused, said why."""
    dsn = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = sa.create_engine(dsn)  # the stdlib's sqlite3
    with queuecore.connect(dsn, sqlite_driver="pysqlite3") as queue:
        with pytest.raises(ValueError) as caught, app.begin() as conn:
            queue.enqueue("a", {}, conn=conn)
        assert str(caught.value).startswith(
            "this connection runs SQLite through sqlite3.dbapi2, the queue through "
            "pysqlite3.dbapi2: two SQLite libraries on one file in one process can corrupt it."
        )
        with pytest.raises(ValueError, match=r"queuecore\.connect\(engine\)"), app.begin() as c:
            queue.enqueue_many("a", [{}], conn=c)
        with queue.engine.begin() as conn:  # the queue's own engine: one library
            assert queue.enqueue("a", {}, conn=conn).created
    app.dispose()
