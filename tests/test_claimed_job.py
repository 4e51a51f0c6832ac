"""A claimed job's payload arrives as the stored JSON text and is decoded where first
read: the job is otherwise a `Job` (equal, replaced, pickled as one), and a stored payload
that is not JSON raises when read, not when claimed (W10)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from queuecore.job import ClaimedJob, Job, to_datetime

FIELDS = ("mail", "emails", -3, 2, 5, "4f2a9c", to_datetime(1_800_000_000.25), None, None)


def claimed(stored: str) -> ClaimedJob:
    kind, queue, priority, attempts, most, token, ends, trace, ready = FIELDS
    return ClaimedJob.read(
        7, kind, stored, queue, priority, attempts, most, token, ends, trace, ready
    )


def job(payload: dict[str, object]) -> Job:
    kind, queue, priority, attempts, most, token, ends, trace, ready = FIELDS
    return Job(7, kind, payload, queue, priority, attempts, most, token, ends, trace, ready)


def test_the_payload_is_decoded_when_first_read_and_kept():
    got = claimed('{"to": "a@example.com", "n": [1, 2.5, null]}')
    assert got._stored_payload is not None  # not decoded until read
    first = got.payload
    assert first == {"to": "a@example.com", "n": [1, 2.5, None]}
    first["seen"] = True  # a handler's change to its payload stays, as on a Job
    assert got.payload is first and got.payload["seen"] is True
    assert got.stored_payload == '{"to": "a@example.com", "n": [1, 2.5, null], "seen": true}'


def test_a_claimed_job_is_the_job_with_that_payload():
    got, same = claimed('{"a": {"b": [1]}}'), job({"a": {"b": [1]}})
    assert got == same and same == got
    assert got != job({"a": {"b": [2]}})
    assert pickle.loads(pickle.dumps(got)) == same
    moved = dataclasses.replace(got, lease_token="0" * 32)
    assert moved == dataclasses.replace(same, lease_token="0" * 32)
    assert repr(got) == repr(same).replace("Job(", "ClaimedJob(", 1)
    with pytest.raises(TypeError):
        hash(got)  # mutable, as a Job is


def test_a_stored_payload_that_is_not_json_raises_when_read_naming_the_job():
    got = claimed("{not json")
    with pytest.raises(ValueError, match="job 7's stored payload is not JSON"):
        got.payload  # noqa: B018
    with pytest.raises(ValueError, match="not JSON"):
        got.payload  # noqa: B018 (it stays unreadable, read after read)
    assert "'stored (not JSON)': '{not json'" in repr(got)
    assert got.stored_payload == "{not json"
