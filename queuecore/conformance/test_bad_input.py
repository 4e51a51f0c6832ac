"""R22: bad input is refused before anything is written, with an error that names the
argument; a database that cannot be used says what to do about it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.helpers import all_rows, count_jobs
from queuecore.migrate import VERSION_TABLE, head_revision

NOT_AN_OBJECT = [["a list"], "a string", None, 42, {"a set": {1, 2}}, {"nan": float("nan")}]


def tables(harness, dsn: str) -> list[str]:
    engine = harness.engine(dsn)
    try:
        return sorted(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("payload", NOT_AN_OBJECT, ids=repr)
def test_r22_payload_that_is_not_a_json_object_is_a_type_error(queue, db, payload):
    with pytest.raises(TypeError, match="payload"):
        queue.enqueue("k", payload)
    with pytest.raises(TypeError, match="payload"):
        queue.enqueue_many("k", [{"fine": 1}, payload, {"fine": 2}])
    assert count_jobs(db) == 0


def test_r22_enqueue_many_refuses_one_payload_in_place_of_a_list(queue, db):
    with pytest.raises(TypeError, match="iterable of payloads"):
        queue.enqueue_many("k", {"to": "a"})
    assert count_jobs(db) == 0


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"kind": ""}, "kind"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": -3}, "max_attempts"),
        ({"delay": -1}, "delay"),
        ({"delay": -0.001}, "delay"),
    ],
    ids=repr,
)
def test_r22_bad_enqueue_argument_is_a_value_error_naming_it(queue, db, options, argument):
    options = {"kind": "k", **options}
    with pytest.raises(ValueError, match=argument):
        queue.enqueue(options.pop("kind"), {}, **options)
    assert count_jobs(db) == 0


def test_r22_empty_kind_in_enqueue_many_writes_nothing(queue, db):
    with pytest.raises(ValueError, match="kind"):
        queue.enqueue_many("", [{}, {}])
    with pytest.raises(ValueError, match="max_attempts"):
        queue.enqueue_many("k", [{}, {}], max_attempts=0)
    assert count_jobs(db) == 0


@pytest.mark.parametrize("limit", [0, -1])
def test_r22_claim_limit_below_one_is_a_value_error(queue, db, limit):
    queue.enqueue("k", {})
    before = all_rows(db)
    with pytest.raises(ValueError, match="limit"):
        queue.claim("w", limit=limit)
    assert all_rows(db) == before


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"lease_seconds": -5}, "lease_seconds"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
    ids=repr,
)
def test_r22_bad_connect_option_is_a_value_error_before_any_write(
    harness, empty_dsn, options, argument
):
    with pytest.raises(ValueError, match=argument):
        queuecore.connect(empty_dsn, **options)
    assert tables(harness, empty_dsn) == []  # not even migrated


@pytest.mark.parametrize("opener", [queuecore.connect, queuecore.migrate])
def test_r22_unreachable_database_says_what_to_check(harness, tmp_path, opener):
    dsn = harness.unreachable(tmp_path)
    with pytest.raises(queuecore.DatabaseUnreachableError) as caught:
        opener(dsn)
    message = str(caught.value)
    assert "cannot open the database" in message
    assert sa.make_url(dsn).database in message
    assert "Check that the server is running" in message


def test_r22_an_unmigrated_database_is_migrated_at_connect_or_refused_with_what_to_run(
    harness, empty_dsn, clock
):
    """Migrated where the backend migrates on connect (SQLite's embedded default), else
    refused with the command to run (PostgreSQL)."""
    if "migrates_on_connect" not in harness.capabilities:
        with pytest.raises(queuecore.NotMigratedError) as caught:
            queuecore.connect(empty_dsn, clock=clock)
        assert "queuecore migrate" in str(caught.value)
        assert "has no queuecore schema" in str(caught.value)
        assert tables(harness, empty_dsn) == []
        return
    with queuecore.connect(empty_dsn, clock=clock) as queue:
        job_id = queue.enqueue("k", {}).id
        assert [job.id for job in queue.claim("w")] == [job_id]
    assert tables(harness, empty_dsn) == sorted(
        ["queuecore_jobs", "queuecore_workers", VERSION_TABLE]
    )
    engine = harness.engine(empty_dsn)
    with engine.connect() as conn:
        version = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    engine.dispose()
    assert version == head_revision(engine)
