"""A small pure-Python model of the rules in docs/contract.md, and random sequences of operations
run against it and a backend (fake clock, rng pinned to 1.0): every return value, every
`get()` and `stats()` must agree with the model after every step."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import hypothesis.strategies as st
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

import queuecore
from queuecore.conformance.fixtures import START
from queuecore.job import to_datetime
from queuecore.sql.schema import jobs
from queuecore.sql.statements import LEASE_EXPIRED_ON_LAST_ATTEMPT

LEASE = 10.0
BACKOFF_BASE, BACKOFF_CAP = 1.0, 8.0
MAX_ATTEMPTS = 3
#: An id no row will have. Not a small one such as 999: the ids grow across the
#: sequences of one run (thousands of jobs), and a row 999 makes the same choices take
#: another path in a later sequence than in an earlier one, which hypothesis reports as
#: `FlakyStrategyDefinition`: the likely cause of the one seen in a full run (SQLite's
#: async face, stop 45).
NO_SUCH_JOB = 2**62
EXAMPLES = int(os.environ.get("QUEUECORE_MODEL_EXAMPLES", "500"))
#: Sequences per configuration, as shares of EXAMPLES, for CI's budget: the invariant
#: reads every row after every step, which costs a round trip a row on a server (500
#: sequences took 192 s on PostgreSQL against 47 s on SQLite; the model test was the
#: suite's second most costly file, 247 s of 2,112). The async face runs the very plans
#: of the operations layer the sync face runs (ADR 0013) through its own executor, and a
#: server the very operations SQLite runs, with its own statements' text: fewer
#: sequences cover those (150 and 50 at the default). QUEUECORE_MODEL_EXAMPLES, the one
#: place the counts are set from, raises or lowers them all.
SHARE = {
    ("sqlite", "sync"): 1.0,
    ("sqlite", "async"): 0.4,
}
#: A backend not named above (PostgreSQL, MariaDB, a third party's): a server's share.
SERVER_SHARE = {"sync": 0.3, "async": 0.1}

QUEUES = ["q1", "q2"]
names = st.sampled_from


@dataclass
class Row:
    id: int
    kind: str
    queue: str
    payload: dict[str, Any]
    priority: int
    max_attempts: int
    dedupe_key: str | None
    created_at: float
    visible_at: float
    state: str = "queued"
    attempts: int = 0
    lease_token: str | None = None
    worker: str | None = None
    last_error: str | None = None
    finished_at: float | None = None
    result: Any = None
    started_at: float | None = None

    def ready(self, now: float) -> bool:
        live = self.state in ("queued", "running")
        return live and self.visible_at <= now and self.attempts < self.max_attempts


class Model:
    """The rules, written as plainly as possible: one dict of rows and the clock."""

    def __init__(self) -> None:
        self.rows: dict[int, Row] = {}
        self.now = START

    def holds(self, job: queuecore.Job) -> Row | None:
        """The fence (R09)."""
        row = self.rows.get(job.id)
        if row and row.state == "running" and row.lease_token == job.lease_token:
            return row
        return None

    def existing(self, dedupe_key: str | None) -> Row | None:
        found = [r for r in self.rows.values() if dedupe_key and r.dedupe_key == dedupe_key]
        return found[0] if found else None

    def settle(self) -> None:
        """R08 as amended: a lease that ends on the last attempt makes its job dead at that
        instant, finished when the lease ended, whatever the database has written yet."""
        for row in self.rows.values():
            expired = row.state == "running" and row.visible_at <= self.now
            if expired and row.attempts >= row.max_attempts:
                row.state, row.finished_at, row.lease_token = "dead", row.visible_at, None
                row.last_error = LEASE_EXPIRED_ON_LAST_ATTEMPT

    def claim(self, limit: int, queues: list[str] | None) -> list[Row]:
        ready = [
            r for r in self.rows.values() if r.ready(self.now) and (not queues or r.queue in queues)
        ]
        return sorted(ready, key=lambda r: (r.priority, r.visible_at, r.id))[:limit]

    def stats(self) -> dict[str, Any]:
        per_queue: dict[str, dict[str, Any]] = {}
        per_kind: dict[str, dict[str, Any]] = {}  # live jobs only (R23)
        for row in self.rows.values():
            if row.state == "done":
                continue
            entries = [per_queue.setdefault(row.queue, empty_stats())]
            if row.state in ("queued", "running"):  # dead and cancelled: per queue only
                kind_entry = {"queued": 0, "running": 0, "ready_now": 0, "oldest_ready_age_s": 0.0}
                entries.append(per_kind.setdefault(row.kind, kind_entry))
            if row.state == "running" and row.started_at is None:
                entries[0]["held_ahead"] += 1
            for entry in entries:
                entry[row.state] += 1
                if row.ready(self.now):
                    entry["ready_now"] += 1
                    age = self.now - row.visible_at
                    entry["oldest_ready_age_s"] = max(entry["oldest_ready_age_s"], age)
        overall = empty_stats()
        for entry in per_queue.values():
            for key in ("queued", "running", "held_ahead", "ready_now", "dead", "cancelled"):
                overall[key] += entry[key]
            overall["oldest_ready_age_s"] = max(
                overall["oldest_ready_age_s"], entry["oldest_ready_age_s"]
            )
        return {**overall, "queues": per_queue, "kinds": per_kind}


def empty_stats() -> dict[str, Any]:
    return {
        "queued": 0,
        "running": 0,
        "held_ahead": 0,
        "ready_now": 0,
        "oldest_ready_age_s": 0.0,
        "dead": 0,
        "cancelled": 0,
    }


class Boom(Exception):
    """What a failing effect raises (R10)."""


class QueueMachine(RuleBasedStateMachine):
    held = Bundle("held")  # every Job ever claimed: live ones and stale ones

    def __init__(self, queue: Any, clock: Any) -> None:
        super().__init__()
        self.queue, self.clock, self.model = queue, clock, Model()
        self.checked: dict[int, Row] = {}  # each row as the last `get` of it agreed
        clock.now = START
        with queue.engine.begin() as conn:
            conn.execute(sa.delete(jobs))

    # --- producing ------------------------------------------------------------------

    @rule(
        kind=names(["a", "b"]),
        queue=names(QUEUES),
        priority=names([0, 1, -1]),
        delay=names([0, 0.5, 3]),
        max_attempts=names([None, 1, 2]),
        dedupe_key=st.none() | names(["d1", "d2"]),
        n=st.integers(0, 9),
    )
    def enqueue(self, kind, queue, priority, delay, max_attempts, dedupe_key, n):
        existing = self.model.existing(dedupe_key)
        if existing is not None and (existing.kind, existing.payload) != (kind, {"n": n}):
            try:  # R27
                self.queue.enqueue(kind, {"n": n}, dedupe_key=dedupe_key)
            except queuecore.DedupeConflict as conflict:
                assert conflict.existing_id == existing.id
                return
            raise AssertionError("another kind or payload under a taken key must conflict")
        res = self.queue.enqueue(
            kind,
            {"n": n},
            queue=queue,
            priority=priority,
            delay=delay,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
        )
        if existing is not None:
            assert (res.id, res.created) == (existing.id, False)
            return
        assert res.created and res.id not in self.model.rows
        self.model.rows[res.id] = Row(
            id=res.id,
            kind=kind,
            queue=queue,
            payload={"n": n},
            priority=priority,
            max_attempts=max_attempts or MAX_ATTEMPTS,
            dedupe_key=dedupe_key,
            created_at=self.model.now,
            visible_at=self.model.now + delay,
        )

    @rule(count=st.integers(1, 3), queue=names(QUEUES))
    def enqueue_many(self, count, queue):
        ids = self.queue.enqueue_many("many", [{"i": i} for i in range(count)], queue=queue)
        assert len(set(ids)) == count and not set(ids) & set(self.model.rows)
        for i, job_id in enumerate(ids):
            self.model.rows[job_id] = Row(
                id=job_id,
                kind="many",
                queue=queue,
                payload={"i": i},
                priority=0,
                max_attempts=MAX_ATTEMPTS,
                dedupe_key=None,
                created_at=self.model.now,
                visible_at=self.model.now,
            )

    # --- consuming ------------------------------------------------------------------

    @rule(
        target=held,
        worker=names(["w1", "w2"]),
        limit=st.integers(1, 3),
        queues=st.none() | st.lists(names([*QUEUES, "q3"]), min_size=1, max_size=2),
    )
    def claim(self, worker, limit, queues):
        claimed = self.queue.claim(worker, limit=limit, queues=queues)
        expected = self.model.claim(limit, queues)
        assert [j.id for j in claimed] == [r.id for r in expected]
        for job, row in zip(claimed, expected, strict=True):
            row.state, row.attempts, row.worker = "running", row.attempts + 1, worker
            row.visible_at, row.lease_token = self.model.now + LEASE, job.lease_token
            row.started_at = None
            assert (job.kind, job.payload, job.queue, job.priority) == (
                row.kind,
                row.payload,
                row.queue,
                row.priority,
            )
            assert (job.attempts, job.max_attempts) == (row.attempts, row.max_attempts)
            assert job.lease_expires_at == to_datetime(row.visible_at)
        return multiple(*[replace(job) for job in claimed])

    @rule(job=held)
    def complete(self, job):
        row = self.model.holds(job)
        assert self.queue.complete(job) is (row is not None)
        if row:
            row.state, row.finished_at, row.lease_token = "done", self.model.now, None

    @rule(job=held, result=names([{"r": 1}, [1, "two"], "text", 0]))
    def complete_with_result(self, job, result):
        row = self.model.holds(job)
        assert self.queue.complete(job, result=result) is (row is not None)
        if row:
            row.state, row.finished_at, row.lease_token = "done", self.model.now, None
            row.result = result

    @rule(job=held, results=st.lists(names([None, {"r": 2}]), min_size=1, max_size=2))
    def complete_many_with_results(self, job, results):
        """The same claim listed once per entry: it completes once, as two calls would."""
        row = self.model.holds(job)
        outcome = self.queue.complete_many([job] * len(results), results=results)
        assert list(outcome) == [row is not None] + [False] * (len(results) - 1)
        if row:
            row.state, row.finished_at, row.lease_token = "done", self.model.now, None
            row.result = results[0]

    @rule(data=st.data())
    def cancel(self, data):
        job_id = data.draw(st.sampled_from([*sorted(self.model.rows), NO_SUCH_JOB]))
        row = self.model.rows.get(job_id)
        live = row is not None and row.state in ("queued", "running")
        assert self.queue.cancel(job_id) is live
        if live:
            row.state, row.finished_at, row.lease_token = "cancelled", self.model.now, None

    @rule(data=st.data())
    def wait_without_waiting(self, data):
        job_id = data.draw(st.sampled_from([*sorted(self.model.rows), NO_SUCH_JOB]))
        snap = self.queue.wait(job_id, timeout=0)
        row = self.model.rows.get(job_id)
        assert (snap is None) is (row is None)
        if row is not None:
            assert (snap.state, snap.result) == (row.state, row.result)

    @rule(job=held)
    def complete_with_failing_effect(self, job):
        def effect(conn: sa.Connection) -> None:
            raise Boom

        if self.model.holds(job):
            try:
                self.queue.complete(job, effect=effect)
            except Boom:
                return  # rolled back: the model does not change
            raise AssertionError("the effect's exception must propagate")
        assert self.queue.complete(job, effect=effect) is False

    @rule(
        job=held,
        error=names(["boom", "x" * 2100]),
        retry_in=st.none() | names([0, 0.5, 2.5]),
        permanent=st.booleans(),
    )
    def fail(self, job, error, retry_in, permanent):
        outcome = self.queue.fail(job, error, retry_in=retry_in, permanent=permanent)
        row = self.model.holds(job)
        if row is None:
            assert outcome is None
            return
        row.last_error, row.lease_token = error[:2000], None
        if permanent or job.attempts >= job.max_attempts:
            assert outcome == "dead"
            row.state, row.finished_at = "dead", self.model.now
        else:
            assert outcome == "queued"
            ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (job.attempts - 1))
            row.state = "queued"
            row.visible_at = self.model.now + (ceiling if retry_in is None else retry_in)

    @rule(job=held)
    def heartbeat(self, job):
        row = self.model.holds(job)
        assert self.queue.heartbeat(job) is (row is not None)
        if row:
            row.visible_at = self.model.now + LEASE

    @rule(claims=st.lists(held, min_size=1, max_size=3))
    def mark_started(self, claims):
        """W9: a row is marked once, when its id and its current token are among those
        given (a token names one of the worker's claims, which may hold several)."""
        ids, tokens = {job.id for job in claims}, {job.lease_token for job in claims}
        marked = [
            row
            for row in self.model.rows.values()
            if row.id in ids
            and row.state == "running"
            and row.lease_token in tokens
            and row.started_at is None
        ]
        assert self.queue.mark_started(claims) == len(marked)
        for row in marked:
            row.started_at = self.model.now

    @rule(job=held)
    def release(self, job):
        row = self.model.holds(job)
        assert self.queue.release(job) is (row is not None)
        if row:
            row.state, row.visible_at, row.lease_token = "queued", self.model.now, None
            row.attempts -= 1

    # --- operating ------------------------------------------------------------------

    @rule(data=st.data())
    def requeue_dead(self, data):
        ids = data.draw(st.none() | st.lists(st.integers(1, 40), max_size=4), label="ids")
        dead = [r for r in self.model.rows.values() if r.state == "dead"]
        wanted = sorted(r.id for r in dead if ids is None or r.id in ids)
        assert self.queue.requeue_dead(ids) == wanted
        for job_id in wanted:
            row = self.model.rows[job_id]
            row.state, row.attempts, row.visible_at = "queued", 0, self.model.now
            row.finished_at = row.lease_token = None

    @rule(
        older_than=names([0, 2, 30]),
        states=names([("done",), ("dead",), ("done", "dead"), ("cancelled",)]),
    )
    def purge(self, older_than, states):
        gone = [
            r.id
            for r in self.model.rows.values()
            if r.state in states and r.finished_at < self.model.now - older_than
        ]
        assert self.queue.purge(older_than=older_than, states=states, batch=2) == len(gone)
        for job_id in gone:
            del self.model.rows[job_id]

    @rule(seconds=names([0.5, 1, 3, LEASE, 2 * LEASE]))
    def time_passes(self, seconds):
        self.clock.advance(seconds)
        self.model.now += seconds
        self.model.settle()

    # --- what can be observed --------------------------------------------------------

    @invariant()
    def observations_agree(self):
        """Every row in one read (R31's list, which reads the columns `get` reads), and
        `get` of each row the model says changed since the last check: a row left
        alone can differ from its last `get` only in what the list shows as well. (A
        `get` of every row after every step made this test the suite's costliest.)"""
        assert self.queue.stats() == self.model.stats()
        dead = [r for r in self.model.rows.values() if r.state == "dead"]
        dead.sort(key=lambda r: (r.finished_at, r.id), reverse=True)
        assert [snap.id for snap in self.queue.dead_jobs(limit=1000)] == [r.id for r in dead]
        listed = self.queue.list_jobs(limit=1000)
        assert [snap.id for snap in listed] == sorted(self.model.rows)
        for snap in listed:
            agrees(snap, self.model.rows[snap.id])
        for job_id, row in self.model.rows.items():
            if self.checked.get(job_id) != row:
                agrees(self.queue.get(job_id), row)
        self.checked = {job_id: replace(row) for job_id, row in self.model.rows.items()}


def agrees(snap: Any, row: Row) -> None:
    """A snapshot says what the model's row says."""
    seen = (snap.state, snap.attempts, snap.max_attempts, snap.last_error, snap.worker)
    assert seen == (row.state, row.attempts, row.max_attempts, row.last_error, row.worker)
    assert snap.started_at == to_datetime(row.started_at)
    assert snap.result == row.result
    assert (snap.kind, snap.queue, snap.payload, snap.priority, snap.dedupe_key) == (
        row.kind,
        row.queue,
        row.payload,
        row.priority,
        row.dedupe_key,
    )
    assert (snap.created_at, snap.visible_at, snap.finished_at) == (
        to_datetime(row.created_at),
        to_datetime(row.visible_at),
        to_datetime(row.finished_at),
    )


@pytest.mark.slow
def test_backend_agrees_with_the_model(make_queue, clock, backend, api):
    queue = make_queue(
        lease_seconds=LEASE,
        max_attempts=MAX_ATTEMPTS,
        backoff_base=BACKOFF_BASE,
        backoff_cap=BACKOFF_CAP,
    )
    run_state_machine_as_test(
        lambda: QueueMachine(queue, clock),
        settings=settings(
            max_examples=max(1, round(EXAMPLES * SHARE.get((backend, api), SERVER_SHARE[api]))),
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_r05_claim_orders_by_ready_time_after_a_release(queue, clock):
    """The model's first catch: a claim must order by the ready time from before the
    claim, which SQLite's RETURNING cannot show (it sees only the updated row)."""
    first, second = queue.enqueue("a", {}).id, queue.enqueue("b", {}).id
    (job,) = queue.claim("w")
    clock.advance(0.5)
    assert queue.release(job)  # `first` is ready again, half a second after `second`
    assert [j.id for j in queue.claim("w", limit=2)] == [second, first]
