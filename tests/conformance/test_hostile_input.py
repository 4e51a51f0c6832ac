"""R22 and hostile input, on both backends. Each input either gets a clear error before
anything is written, or is stored and handed back unchanged; the table is compared
whole before and after, so a half-written row or a stuck job would show.

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
from queuecore.migrate import VERSION_TABLE, head_revision
from queuecore.schema import jobs

HOSTILE_NAMES = [
    "'; DROP TABLE queuecore_jobs; --",
    "quote \" and ' both",
    "100% _wild_ [cards] \\ backslash",
    "?, $1, %s, :name, %(x)s",
    "émoji 😀 and ␀ (not a NUL)",
]


def table(queue: Any) -> list[tuple[Any, ...]]:
    with queue.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.select(jobs).order_by(jobs.c.id))]


def refused(queue: Any, error: type[Exception], match: str, call: Any) -> None:
    before = table(queue)
    with pytest.raises(error, match=match):
        call()
    assert table(queue) == before


@pytest.mark.parametrize(
    "payload",
    [[1], "text", None, 3, {"a": object()}, {"a": math.nan}, {"a": {1, 2}}, {1: "int key"}],
    ids=["list", "str", "None", "int", "object", "nan", "set", "int-key"],
)
def test_r22_payload_that_is_not_a_json_object_is_a_type_error(queue, payload):
    queue.enqueue("seen", {"ok": True})
    refused(queue, TypeError, "payload", lambda: queue.enqueue("k", payload))
    refused(queue, TypeError, "payload", lambda: queue.enqueue_many("k", [{}, payload, {}]))


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("kind", lambda q: q.enqueue("", {})),
        ("kind", lambda q: q.enqueue(None, {})),
        ("queue", lambda q: q.enqueue("k", {}, queue="")),
        ("max_attempts", lambda q: q.enqueue("k", {}, max_attempts=0)),
        ("max_attempts", lambda q: q.enqueue("k", {}, max_attempts=2**31)),
        ("priority", lambda q: q.enqueue("k", {}, priority=2**31)),
        ("priority", lambda q: q.enqueue("k", {}, priority="1")),
        ("delay", lambda q: q.enqueue("k", {}, delay=-1)),
        ("delay", lambda q: q.enqueue("k", {}, delay=math.nan)),
        ("delay", lambda q: q.enqueue("k", {}, delay=math.inf)),
        ("delay", lambda q: q.enqueue("k", {}, delay=1e12)),
        ("run_at", lambda q: q.enqueue("k", {}, run_at=math.nan)),
        ("run_at", lambda q: q.enqueue("k", {}, run_at=1e20)),
        ("dedupe_key", lambda q: q.enqueue("k", {}, dedupe_key="")),
        ("limit", lambda q: q.claim("w", limit=0)),
        ("queues", lambda q: q.claim("w", queues=[])),
        ("worker", lambda q: q.claim("")),
        ("older_than", lambda q: q.purge(older_than=-1)),
        ("batch", lambda q: q.purge(batch=0)),
        ("a job id", lambda q: q.get(2**63)),
        ("a job id", lambda q: q.requeue_dead([2**63])),
    ],
)
def test_r22_bad_argument_is_a_value_error_naming_it(queue, name, call):
    queue.enqueue("seen", {})
    refused(queue, ValueError, name, lambda: call(queue))


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("lease_seconds", {"lease_seconds": 0}),
        ("lease_seconds", {"lease_seconds": -5}),
        ("lease_seconds", {"lease_seconds": math.nan}),
        ("max_attempts", {"max_attempts": 0}),
        ("backoff_base", {"backoff_base": -1}),
        ("backoff_cap", {"backoff_cap": math.inf}),
        ("max_payload_bytes", {"max_payload_bytes": 0}),
    ],
)
def test_r22_bad_connect_option_is_a_value_error_naming_it(queue, make_queue, name, options):
    queue.enqueue("seen", {})
    refused(queue, ValueError, name, lambda: make_queue(**options))


def test_bad_retry_in_leaves_the_job_running_under_its_lease(queue, clock):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    for retry_in in (-1, math.nan, math.inf):
        refused(queue, ValueError, "retry_in", lambda r=retry_in: queue.fail(job, "x", retry_in=r))
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
def test_non_integer_job_id_is_a_type_error(queue, call):
    queue.enqueue("k", {}, max_attempts=1)
    (job,) = queue.claim("w")
    assert queue.fail(job, "boom") == "dead"
    refused(queue, TypeError, "id", lambda: call(queue))
    assert queue.get(job.id).state == "dead"


def test_unknown_dialect_and_garbage_dsn():
    with pytest.raises(queuecore.UnknownBackendError, match="mysql"):
        queuecore.connect("mysql://user@localhost/jobs")
    with pytest.raises(ValueError, match="not a database URL"):
        queuecore.connect("this is not a dsn")
    with pytest.raises(ValueError, match="not a database URL"):
        queuecore.migrate("::")


def test_r22_unreachable_database_says_what_to_check(backend, tmp_path):
    dsn = (
        f"sqlite:///{tmp_path / 'no-such-folder' / 'jobs.db'}"
        if backend == "sqlite"
        else "postgresql+psycopg://postgres@127.0.0.1:1/postgres?connect_timeout=5"
    )
    with pytest.raises(queuecore.DatabaseUnreachableError, match="Check that"):
        queuecore.connect(dsn)
    assert not (tmp_path / "no-such-folder").exists()


def test_r22_database_never_migrated(backend, empty_dsn):
    if backend == "sqlite":  # the embedded default migrates on connect
        with queuecore.connect(empty_dsn) as queue:
            assert queue.get(queue.enqueue("k", {}).id).state == "queued"
        return
    with pytest.raises(queuecore.NotMigratedError, match="queuecore migrate --dsn"):
        queuecore.connect(empty_dsn)
    engine = sa.create_engine(empty_dsn)
    assert sa.inspect(engine).get_table_names() == []  # refused without creating anything
    engine.dispose()


def test_database_migrated_by_a_newer_queuecore_is_refused_untouched(queue, dsn):
    queue.enqueue("k", {"kept": True})
    before = table(queue)
    version = sa.table(VERSION_TABLE, sa.column("version_num"))
    with queue.engine.begin() as conn:
        conn.execute(sa.update(version).values(version_num="9999_from_the_future"))
    try:
        for attempt in (lambda: queuecore.connect(dsn), lambda: queuecore.migrate(dsn)):
            with pytest.raises(queuecore.SchemaTooNewError, match="9999_from_the_future"):
                attempt()
        with queue.engine.connect() as conn:
            assert conn.execute(sa.select(version.c.version_num)).all() == [
                ("9999_from_the_future",)
            ]
        assert table(queue) == before
    finally:
        with queue.engine.begin() as conn:
            conn.execute(sa.update(version).values(version_num=head_revision()))


def test_payload_size_limit(queue, make_queue):
    over_default = {"blob": "x" * (1 << 20)}
    refused(
        queue, ValueError, "max_payload_bytes=1048576", lambda: queue.enqueue("k", over_default)
    )
    small = make_queue(max_payload_bytes=64)
    at_limit = {"a": "x" * (64 - len('{"a": ""}'))}
    assert small.get(small.enqueue("k", at_limit).id).payload == at_limit
    over = {"a": at_limit["a"] + "x"}
    refused(small, ValueError, "max_payload_bytes=64", lambda: small.enqueue("k", over))
    refused(small, ValueError, "max_payload_bytes=64", lambda: small.enqueue_many("k", [{}, over]))


@pytest.mark.parametrize("bad", ["nul\x00byte", "lone \udc80 surrogate"], ids=["nul", "surrogate"])
def test_text_a_database_cannot_hold_is_refused_before_writing(queue, bad):
    queue.enqueue("seen", {})
    refused(queue, ValueError, "NUL|Unicode", lambda: queue.enqueue("k", {"a": bad}))
    refused(queue, ValueError, "NUL|Unicode", lambda: queue.enqueue("k", {"n": [{bad: 1}]}))
    refused(queue, ValueError, "kind", lambda: queue.enqueue(bad, {}))
    refused(queue, ValueError, "queue", lambda: queue.enqueue("k", {}, queue=bad))
    refused(queue, ValueError, "dedupe_key", lambda: queue.enqueue("k", {}, dedupe_key=bad))
    refused(queue, ValueError, "worker", lambda: queue.claim(bad))
    refused(queue, ValueError, "queue", lambda: queue.claim("w", queues=[bad]))


def test_error_text_a_database_cannot_hold_is_escaped_not_lost(queue):
    queue.enqueue("k", {})
    (job,) = queue.claim("w")
    assert queue.fail(job, "nul\x00 and \udc80 surrogate") == "queued"
    assert queue.get(job.id).last_error == "nul\\x00 and \\udc80 surrogate"


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_sql_metacharacters_are_stored_and_returned_unchanged(queue, name):
    payload = {name: [name, {"nested": name}]}
    res = queue.enqueue(name, payload, queue=name, dedupe_key=name)
    assert queue.enqueue("other", {}, dedupe_key=name) == queuecore.EnqueueResult(res.id, False)
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
    assert len(table(queue)) == 1
