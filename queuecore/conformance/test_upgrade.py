"""R28: an upgrade keeps every job. A database at an earlier revision is filled with jobs
in every state it knows, upgraded, and each job must be stored as before and behave as
before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

import queuecore
from queuecore.conformance.fixtures import START, FakeClock
from queuecore.conformance.harness import Harness
from queuecore.conformance.test_migrations import drift
from queuecore.job import to_datetime
from queuecore.migrate import (
    alembic_config,
    current_revision,
    head_revision,
    include_object,
    models,
)

#: The columns added since each revision the test starts from.
NEW_COLUMNS = {
    "0002": ("result", "awaited", "trace_context", "ready_at", "errors", "started_at"),
    "0003": ("ready_at", "errors", "started_at"),
}
#: The columns each of the last revisions of every chain added (0006 / mariadb_0003, and
#: 0005 / mariadb_0002 before it), newest first.
LAST_ADDED = (("started_at",), ("errors",))
LEASE = 30.0


@pytest.fixture
def old_engine(harness: Harness, empty_dsn: str) -> Iterator[sa.Engine]:
    engine = harness.engine(empty_dsn)
    yield engine
    engine.dispose()


def upgrade(engine: sa.Engine, revision: str) -> None:
    command.upgrade(alembic_config(engine), revision)


def rows(engine: sa.Engine) -> dict[int, dict[str, Any]]:
    table = sa.Table("queuecore_jobs", sa.MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        found = conn.execute(sa.select(table).order_by(table.c.id)).mappings().all()
    return {row["id"]: dict(row) for row in found}


def job(name: str, state: str, **values: Any) -> dict[str, Any]:
    row = {
        "kind": f"kind-{name}",
        "queue": "mail" if "mail" in name else "default",
        "payload": {"name": name, "nested": [1, 2.5, None, {"é": "ü"}]},
        "priority": 0,
        "state": state,
        "attempts": 0,
        "max_attempts": 3,
        "visible_at": START - 60,
        "lease_token": None,
        "worker": None,
        "last_error": None,
        "dedupe_key": f"key-{name}",
        "created_at": START - 120,
        "finished_at": None,
    }
    return {**row, **values}


EVERY_STATE = {
    "queued": job("queued", "queued"),
    "queued_mail_urgent": job("queued_mail_urgent", "queued", priority=-5),
    "delayed": job("delayed", "queued", visible_at=START + 3600),
    "retrying": job("retrying", "queued", attempts=1, last_error="boom"),
    "running": job(
        "running", "running", attempts=1, visible_at=START + 20, lease_token="t1", worker="w1"
    ),
    "lease_over": job(
        "lease_over", "running", attempts=2, visible_at=START - 5, lease_token="t2", worker="w2"
    ),
    "last_attempt_over": job(
        "last_attempt_over",
        "running",
        attempts=3,
        visible_at=START - 5,
        lease_token="t3",
        worker="w3",
    ),
    "done": job("done", "done", attempts=1, worker="w4", finished_at=START - 30),
    "dead": job("dead", "dead", attempts=3, last_error="gave up", finished_at=START - 40),
    "no_key": job("no_key", "queued", dedupe_key=None),
    "purged": job("purged", "done", finished_at=START - 1000),
}


#: What 0003 can hold and 0002 cannot: the cancelled state, a result, a waiter, a trace.
SINCE_0003 = {
    "cancelled": job("cancelled", "cancelled", finished_at=START - 50),
    "done": {**EVERY_STATE["done"], "result": {"sent": ["é", 1.5]}},
    "running": {**EVERY_STATE["running"], "awaited": True},
    "queued": {**EVERY_STATE["queued"], "trace_context": '{"traceparent": "00-ab-cd-01"}'},
}


def every_state(revision: str) -> dict[str, dict[str, Any]]:
    if revision == "0002":
        return EVERY_STATE
    return {**EVERY_STATE, **SINCE_0003}


def fill(engine: sa.Engine, revision: str) -> dict[str, int]:
    # The models' table, not a reflected one: its JSON columns are JSON on MariaDB too,
    # which reflects them as text. Only the columns given are written.
    table = models(engine).tables["queuecore_jobs"]
    ids = {}
    with engine.begin() as conn:
        for name, row in every_state(revision).items():
            ids[name] = conn.execute(table.insert().values(**row).returning(table.c.id)).scalar()
        conn.execute(table.delete().where(table.c.id == ids["purged"]))  # the newest id
    return ids


@pytest.mark.requires("shared_chain")
@pytest.mark.parametrize("revision", sorted(NEW_COLUMNS))
def test_r28_upgrade_to_head_keeps_every_job_in_every_state(old_engine, empty_dsn, revision):
    upgrade(old_engine, revision)
    assert current_revision(old_engine) == revision
    ids = fill(old_engine, revision)
    before = rows(old_engine)
    assert len(before) == len(every_state(revision)) - 1

    upgrade(old_engine, "head")

    assert current_revision(old_engine) == head_revision(old_engine)
    after = rows(old_engine)
    added = NEW_COLUMNS[revision]
    assert {i: {k: v for k, v in r.items() if k not in added} for i, r in after.items()} == before
    assert all(r[c] is None for r in after.values() for c in added if c != "errors")
    _errors_from_last_error(before, after)
    assert drift(old_engine, include_object=include_object) == []  # indexes and all
    _still_claimable(empty_dsn, ids)
    if revision == "0003":
        _kept_since_0003(empty_dsn, ids)


@pytest.mark.parametrize("back", [1, 2], ids=["previous", "one-before"])
def test_r28_upgrade_from_the_last_revisions_keeps_every_job(old_engine, empty_dsn, back):
    """Every backend's chain (MariaDB's too): its revision `back` steps before head,
    filled with a job in every state, upgraded to head. The columns added since are
    NULL (`started_at`: no job was started under a claim of the new release), but for
    R32's history, which starts from each job's last error."""
    script = ScriptDirectory.from_config(alembic_config(old_engine))
    revision = head_revision(old_engine)
    for _ in range(back):
        down = script.get_revision(revision).down_revision
        assert isinstance(down, str)
        revision = down
    upgrade(old_engine, revision)
    ids = fill(old_engine, "0003")
    before = rows(old_engine)

    upgrade(old_engine, "head")

    after = rows(old_engine)
    added = [column for columns in LAST_ADDED[:back] for column in columns]
    assert {i: {k: v for k, v in r.items() if k not in added} for i, r in after.items()} == before
    assert all(r[c] is None for r in after.values() for c in added if c != "errors")
    if "errors" in added:
        _errors_from_last_error(before, after)
    assert drift(old_engine, include_object=include_object) == []
    _still_claimable(empty_dsn, ids)
    _kept_since_0003(empty_dsn, ids)
    queue = queuecore.connect(empty_dsn, clock=FakeClock())
    try:
        history = [{"attempt": 1, "at": to_datetime(START - 120), "error": "boom"}]
        assert queue.get(ids["retrying"]).errors == (history if "errors" in added else [])
    finally:
        queue.close()


def _errors_from_last_error(before: dict[int, Any], after: dict[int, Any]) -> None:
    """0005: a job's old `last_error` is its history's one entry; no error, no history."""
    for job_id, row in before.items():
        errors = after[job_id]["errors"]
        if isinstance(errors, str):  # a reflected JSON column on MariaDB is text
            errors = json.loads(errors)
        if row["last_error"] is None:
            assert errors is None, (job_id, errors)
            continue
        at = row["finished_at"] if row["finished_at"] is not None else row["created_at"]
        assert errors == [{"attempt": row["attempts"], "at": at, "error": row["last_error"]}], (
            job_id,
            errors,
        )


def _still_claimable(dsn: str, ids: dict[str, int]) -> None:
    """Every upgraded job behaves as the rules say, new operations included."""
    clock = FakeClock()
    queue = queuecore.connect(dsn, clock=clock, rng=lambda: 1.0, lease_seconds=LEASE)
    try:
        fresh = queue.enqueue("new", {}, delay=1)
        assert fresh.id > ids["purged"]  # a purged id is never handed out again
        claimed = queue.claim("after-upgrade", limit=20)
        assert [j.id for j in claimed] == [
            ids["queued_mail_urgent"],
            ids["queued"],
            ids["retrying"],
            ids["no_key"],
            ids["lease_over"],
        ]
        assert [j.attempts for j in claimed] == [1, 1, 2, 1, 3]
        # No row had a ready_at before the upgrade: the claim writes what it found.
        ready = [START - 60] * 4 + [START - 5]
        assert [j.ready_at for j in claimed] == [to_datetime(at) for at in ready]
        assert queue.get(ids["last_attempt_over"]).state == "dead"  # R08, as before
        assert queue.complete(claimed[0], result={"upgraded": True})
        assert queue.get(ids["queued_mail_urgent"]).result == {"upgraded": True}
        assert queue.cancel(ids["delayed"]) and queue.cancel(ids["running"])
        assert queue.requeue_dead([ids["dead"]]) == [ids["dead"]]
        payload = EVERY_STATE["queued"]["payload"]
        again = queue.enqueue("kind-queued", payload, dedupe_key="key-queued")
        assert (again.id, again.created) == (ids["queued"], False)
        assert queue.get(ids["done"]).state == "done"
        clock.advance(2 * LEASE)
        assert {j.id for j in queue.claim("later", limit=20)} >= {ids["dead"], fresh.id}
    finally:
        queue.close()


def _kept_since_0003(dsn: str, ids: dict[str, int]) -> None:
    """What only 0003 could hold reads back after the upgrade to 0004."""
    queue = queuecore.connect(dsn, clock=FakeClock())
    try:
        assert queue.get(ids["cancelled"]).state == "cancelled"
        assert queue.get(ids["done"]).result == {"sent": ["é", 1.5]}
        assert not queue.cancel(ids["cancelled"])
    finally:
        queue.close()
