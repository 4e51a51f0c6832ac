"""R35: the swap keeps every id while both sides take new jobs between the first copy
and the last, in both directions, SQLite <-> PostgreSQL and PostgreSQL <-> MariaDB: no
id is handed out by both sides, a later copy moves the source's new jobs with their own
ids, every id a client was given polls to its own job on the new side, and a copy killed
halfway leaves a target whose next enqueue works."""

from __future__ import annotations

import pytest

import queuecore
from tests.swap.helpers import new_pair, rows

DIRECTIONS = (
    "sqlite-to-postgresql",
    "postgresql-to-sqlite",
    "postgresql-to-mariadb",
    "mariadb-to-postgresql",
)
RESERVE = 1000  # small, so a test can also see a source run past it


@pytest.fixture(params=DIRECTIONS)
def pair(request, tmp_path):
    return new_pair(request, tmp_path)


def enqueue(dsn: str, side: str, count: int, given: dict[int, dict[str, object]]) -> None:
    """`count` jobs on one side, each id noted with the payload its client sent."""
    with queuecore.connect(dsn) as queue:
        for n in range(count):
            payload = {"side": side, "n": n, "of": len(given)}
            job_id = queue.enqueue("order", payload).id
            assert job_id not in given, f"id {job_id} was handed out twice"
            given[job_id] = payload


def test_r35_both_sides_take_jobs_between_copies_and_every_id_stays_its_own(pair):
    source, target = pair
    given: dict[int, dict[str, object]] = {}
    enqueue(source, "old", 3, given)
    first = queuecore.copy(source, target, reserve_ids=RESERVE)
    assert (first.copied, first.next_id, first.reserved) == (3, 3 + RESERVE, RESERVE)

    for round_ in range(2):  # traffic on both sides, then a copy; twice
        enqueue(source, "old", 2, given)
        enqueue(target, "new", 2, given)
        later = queuecore.copy(source, target, reserve_ids=RESERVE)
        assert later.copied == 2, round_

    on_target = rows(target)
    assert on_target.keys() == given.keys()
    assert {job_id: row["payload"] for job_id, row in on_target.items()} == given
    with queuecore.connect(target) as queue:  # what a client polling its id sees
        assert all(queue.get(job_id).payload == sent for job_id, sent in given.items())


def test_r35_a_source_past_its_reserved_ids_is_refused_before_anything_is_written(pair):
    source, target = pair
    queuecore.copy(source, target, reserve_ids=2)
    enqueue(target, "new", 1, {})  # id 3
    enqueue(source, "old", 3, {})  # ids 1, 2 and 3: one past its reserve
    with pytest.raises(queuecore.CopyConflictError, match=r"ids the source uses \(\[3\]\)"):
        queuecore.copy(source, target)
    assert [row["payload"]["side"] for row in rows(target).values()] == ["new"]


def test_r35_a_copy_killed_halfway_leaves_a_target_that_takes_new_jobs(pair):
    source, target = pair
    given: dict[int, dict[str, object]] = {}
    enqueue(source, "old", 6, given)

    def killed(_rows: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        queuecore.copy(source, target, batch=2, reserve_ids=RESERVE, progress=killed)
    assert len(rows(target)) == 2
    enqueue(target, "new", 1, given)  # before the fix: PostgreSQL handed out id 1 again
    report = queuecore.copy(source, target, batch=2, reserve_ids=RESERVE)
    assert (report.copied, report.already_there) == (4, 2)
    assert {job_id: row["payload"] for job_id, row in rows(target).items()} == given
