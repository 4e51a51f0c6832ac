"""R27: a dedupe key taken by a job of another kind or payload is a conflict, not a hit."""

from __future__ import annotations

import pytest

import queuecore
from queuecore.conformance.helpers import all_rows


def test_r27_same_key_other_payload_raises_dedupe_conflict(queue, db):
    first = queue.enqueue("email", {"to": "a@example.com"}, dedupe_key="order-1").id
    before = all_rows(db)

    with pytest.raises(queuecore.DedupeConflict, match="order-1") as raised:
        queue.enqueue("email", {"to": "b@example.com"}, dedupe_key="order-1")

    assert raised.value.existing_id == first
    assert isinstance(raised.value, ValueError)
    assert all_rows(db) == before


def test_r27_same_key_other_kind_raises_dedupe_conflict(queue, db):
    first = queue.enqueue("email", {"to": "a"}, dedupe_key="k1").id
    before = all_rows(db)
    with pytest.raises(queuecore.DedupeConflict, match="kind") as raised:
        queue.enqueue("sms", {"to": "a"}, dedupe_key="k1")
    assert raised.value.existing_id == first
    assert all_rows(db) == before


def test_r27_same_key_same_work_is_r02(queue, db):
    payload = {"to": "a", "items": [1, 2.5], "nested": {"b": None}}
    first = queue.enqueue("email", payload, dedupe_key="k1")
    again = queue.enqueue("email", dict(reversed(payload.items())), dedupe_key="k1")
    assert (again.id, again.created) == (first.id, False)
    assert len(all_rows(db)) == 1


def test_r27_a_conflict_inside_the_callers_transaction_writes_nothing(queue, db):
    queue.enqueue("email", {"to": "a"}, dedupe_key="k1")
    before = all_rows(db)
    with queue.engine.connect() as conn, conn.begin(), pytest.raises(queuecore.DedupeConflict):
        queue.enqueue("email", {"to": "b"}, dedupe_key="k1", conn=conn)
    assert all_rows(db) == before
