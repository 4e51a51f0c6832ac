"""Hostile input beyond test_bad_input's R22 cases, on both backends. Each input either
gets a clear error before anything is written, or is stored and handed back unchanged;
the table is compared whole before and after, so a half-written row or a stuck job
would show.

Decided for text the databases cannot hold (PostgreSQL text and jsonb refuse NUL; no
driver encodes a lone surrogate): in a payload, kind, queue, dedupe_key or worker name
it is a ValueError on both backends; in a failure's error text it is escaped
(NUL as \\x00, a surrogate as \\udc80), because refusing a failure report would leave
its job running until the lease ends with its error lost."""

from __future__ import annotations

import math
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.conformance.helpers import all_rows
from queuecore.migrate import VERSION_TABLE, head_revision

HOSTILE_NAMES = [
    "'; DROP TABLE queuecore_jobs; --",
    "quote \" and ' both",
    "100% _wild_ [cards] \\ backslash",
    "?, $1, %s, :name, %(x)s",
    "émoji 😀 and ␀ (not a NUL)",
]


def refused(db: sa.Engine, error: type[Exception], match: str, call: Any) -> None:
    before = all_rows(db)
    with pytest.raises(error, match=match):
        call()
    assert all_rows(db) == before


@pytest.mark.parametrize("payload", [{"a": object()}, {1: "int key"}], ids=["object", "int-key"])
def test_payload_that_would_not_come_back_unchanged_is_a_type_error(queue, db, payload):
    queue.enqueue("seen", {"ok": True})
    refused(db, TypeError, "payload", lambda: queue.enqueue("k", payload))
    refused(db, TypeError, "payload", lambda: queue.enqueue_many("k", [{}, payload, {}]))


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("kind", lambda q: q.enqueue(None, {})),
        ("queue", lambda q: q.enqueue("k", {}, queue="")),
        ("max_attempts", lambda q: q.enqueue("k", {}, max_attempts=2**31)),
        ("priority", lambda q: q.enqueue("k", {}, priority=2**31)),
        ("priority", lambda q: q.enqueue("k", {}, priority="1")),
        ("delay", lambda q: q.enqueue("k", {}, delay=math.nan)),
        ("delay", lambda q: q.enqueue("k", {}, delay=math.inf)),
        ("delay", lambda q: q.enqueue("k", {}, delay=1e12)),
        ("run_at", lambda q: q.enqueue("k", {}, run_at=math.nan)),
        ("run_at", lambda q: q.enqueue("k", {}, run_at=1e20)),
        ("dedupe_key", lambda q: q.enqueue("k", {}, dedupe_key="")),
        ("queues", lambda q: q.claim("w", queues=[])),
        ("worker", lambda q: q.claim("")),
        ("older_than", lambda q: q.purge(older_than=-1)),
        ("batch", lambda q: q.purge(batch=0)),
        ("a job id", lambda q: q.get(2**63)),
        ("a job id", lambda q: q.requeue_dead([2**63])),
    ],
)
def test_bad_argument_is_a_value_error_naming_it(queue, db, name, call):
    queue.enqueue("seen", {})
    refused(db, ValueError, name, lambda: call(queue))


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("lease_seconds", {"lease_seconds": math.nan}),
        ("max_attempts", {"max_attempts": 2**31}),
        ("backoff_base", {"backoff_base": -1}),
        ("backoff_cap", {"backoff_cap": math.inf}),
        ("max_payload_bytes", {"max_payload_bytes": 0}),
    ],
)
def test_bad_connect_option_is_a_value_error_naming_it(queue, db, make_queue, name, options):
    queue.enqueue("seen", {})
    refused(db, ValueError, name, lambda: make_queue(**options))


def test_bad_retry_in_leaves_the_job_running_under_its_lease(queue, db, clock):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    for retry_in in (-1, math.nan, math.inf):
        refused(db, ValueError, "retry_in", lambda r=retry_in: queue.fail(job, "x", retry_in=r))
    clock.advance(queue.lease_seconds)
    (again,) = queue.claim("w")
    assert (again.id, again.attempts) == (job.id, 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.get("1"),
        lambda q: q.get(1.0),
        lambda q: q.get(True),
        lambda q: q.get(None),
        lambda q: q.requeue_dead(["1"]),
        lambda q: q.requeue_dead([1.5]),
        lambda q: q.requeue_dead(1),
        lambda q: q.requeue_dead("1"),
    ],
    ids=["str", "float", "bool", "None", "str-in-list", "float-in-list", "int-not-list", "str-ids"],
)
def test_non_integer_job_id_is_a_type_error(queue, db, call):
    queue.enqueue("k", {}, max_attempts=1)
    (job,) = queue.claim("w")
    assert queue.fail(job, "boom") == "dead"
    refused(db, TypeError, "id", lambda: call(queue))
    assert queue.get(job.id).state == "dead"


def test_unknown_dialect_and_garbage_dsn():
    with pytest.raises(queuecore.UnknownBackendError, match="mssql"):
        queuecore.connect("mssql+pyodbc://user@localhost/jobs")
    with pytest.raises(ValueError, match="not a database URL"):
        queuecore.connect("this is not a dsn")
    with pytest.raises(ValueError, match="not a database URL"):
        queuecore.migrate("::")


def test_database_migrated_by_a_newer_queuecore_is_refused_untouched(queue, db, dsn):
    queue.enqueue("k", {"kept": True})
    before = all_rows(db)
    version = sa.table(VERSION_TABLE, sa.column("version_num"))
    with db.begin() as conn:
        conn.execute(sa.update(version).values(version_num="9999_from_the_future"))
    try:
        for attempt in (lambda: queuecore.connect(dsn), lambda: queuecore.migrate(dsn)):
            with pytest.raises(queuecore.SchemaTooNewError, match="9999_from_the_future"):
                attempt()
        with db.connect() as conn:
            assert conn.execute(sa.select(version.c.version_num)).all() == [
                ("9999_from_the_future",)
            ]
        assert all_rows(db) == before
    finally:
        with db.begin() as conn:
            conn.execute(sa.update(version).values(version_num=head_revision(db)))


def test_payload_size_limit(queue, db, make_queue):
    over_default = {"blob": "x" * (1 << 20)}
    limit = "max_payload_bytes=1048576"
    refused(db, ValueError, limit, lambda: queue.enqueue("k", over_default))
    small = make_queue(max_payload_bytes=64)
    at_limit = {"a": "x" * (64 - len('{"a": ""}'))}
    assert small.get(small.enqueue("k", at_limit).id).payload == at_limit
    over = {"a": at_limit["a"] + "x"}
    refused(db, ValueError, "max_payload_bytes=64", lambda: small.enqueue("k", over))
    refused(db, ValueError, "max_payload_bytes=64", lambda: small.enqueue_many("k", [{}, over]))


@pytest.mark.parametrize("bad", ["nul\x00byte", "lone \udc80 surrogate"], ids=["nul", "surrogate"])
def test_text_a_database_cannot_hold_is_refused_before_writing(queue, db, bad):
    queue.enqueue("seen", {})
    refused(db, ValueError, "NUL|Unicode", lambda: queue.enqueue("k", {"a": bad}))
    refused(db, ValueError, "NUL|Unicode", lambda: queue.enqueue("k", {"n": [{bad: 1}]}))
    refused(db, ValueError, "kind", lambda: queue.enqueue(bad, {}))
    refused(db, ValueError, "queue", lambda: queue.enqueue("k", {}, queue=bad))
    refused(db, ValueError, "dedupe_key", lambda: queue.enqueue("k", {}, dedupe_key=bad))
    refused(db, ValueError, "worker", lambda: queue.claim(bad))
    refused(db, ValueError, "queue", lambda: queue.claim("w", queues=[bad]))


def test_error_text_a_database_cannot_hold_is_escaped_not_lost(queue):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    assert queue.fail(job, "nul\x00 and \udc80 surrogate") == "queued"
    assert queue.get(job.id).last_error == "nul\\x00 and \\udc80 surrogate"


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_sql_metacharacters_are_stored_and_returned_unchanged(queue, db, name):
    payload = {name: [name, {"nested": name}]}
    res = queue.enqueue(name, payload, queue=name, dedupe_key=name)
    assert queue.enqueue(name, payload, dedupe_key=name) == queuecore.EnqueueResult(res.id, False)
    with pytest.raises(queuecore.DedupeConflict) as conflict:  # R27
        queue.enqueue("other", {}, dedupe_key=name)
    assert conflict.value.existing_id == res.id
    assert queue.stats(name)["queued"] == 1
    assert queue.claim("w", queues=["default"]) == []
    (job,) = queue.claim(name, queues=[name])
    assert (job.id, job.kind, job.queue, job.payload) == (res.id, name, name, payload)
    assert queue.fail(job, name) == "queued"
    snap = queue.get(res.id)
    assert (snap.kind, snap.queue, snap.payload, snap.dedupe_key, snap.last_error, snap.worker) == (
        name,
        name,
        payload,
        name,
        name,
        name,
    )
    assert len(all_rows(db)) == 1
