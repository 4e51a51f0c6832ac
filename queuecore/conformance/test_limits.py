"""R29: one set of limits. The same boundary inputs (exactly at each limit, one past it,
far past it) get the same verdict on every backend and both faces: stored and handed back
unchanged, or a ValueError naming the argument and the limit with nothing written. So a
job one backend accepted can always be copied to another."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from queuecore.conformance.helpers import all_rows

NAME = 255
DEPTH = 31
PAYLOAD_BYTES = 200
RESULT_BYTES = 200
FAR = 100_000


def deep(depth: int) -> Any:
    """A JSON value `depth` levels deep as MariaDB's JSON_DEPTH counts (a scalar is 1, each
    enclosing array adds 1), built without recursion so that FAR levels cost nothing."""
    value: Any = 0
    for _ in range(depth - 1):
        value = [value]
    return value


def sized(size: int) -> dict[str, str]:
    """A payload of exactly `size` bytes as JSON."""
    return {"a": "x" * (size - len('{"a": ""}'))}


# (the argument's name as the error says it, the value, whether it is within the limits)
NAMES = [
    ("at-limit", "n" * NAME, True),
    ("at-limit-4-byte-characters", "😀" * NAME, True),
    ("one-past", "n" * (NAME + 1), False),
    ("far-past", "n" * FAR, False),
    ("tab", "a\tb", True),
    ("escape", "a\x1b[2Jb", False),
    ("newline", "a\nb", False),
    ("delete", "a\x7fb", False),
    ("c1-control", "a\x85b", False),
]
PAYLOADS = [
    ("depth-at-limit", {"a": deep(DEPTH - 1)}, True),
    ("depth-one-past", {"a": deep(DEPTH)}, False),
    ("depth-far-past", {"a": deep(FAR)}, False),
    ("bytes-at-limit", sized(PAYLOAD_BYTES), True),
    ("bytes-one-past", sized(PAYLOAD_BYTES + 1), False),
    ("bytes-far-past", sized(PAYLOAD_BYTES * 1000), False),
]
RESULTS = [
    ("depth-at-limit", deep(DEPTH), True),
    ("depth-one-past", deep(DEPTH + 1), False),
    ("depth-far-past", deep(FAR), False),
    ("bytes-at-limit", sized(RESULT_BYTES), True),
    ("bytes-one-past", sized(RESULT_BYTES + 1), False),
    ("bytes-far-past", sized(RESULT_BYTES * 1000), False),
]


def verdict(db: Any, refusal: str, call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """("stored", `call(*args, **kw)`), or ("refused", None) for a ValueError that matches
    `refusal` and left every row as it was. Any other error fails the test."""
    before = all_rows(db)
    try:
        return "stored", call(*args, **kw)
    except ValueError as exc:
        assert re.search(refusal, str(exc)), str(exc)
        assert all_rows(db) == before
        return "refused", None


def expected(cases: list[tuple[str, Any, bool]]) -> dict[str, str]:
    return {case: "stored" if fits else "refused" for case, _, fits in cases}


@pytest.mark.parametrize("argument", ["kind", "queue", "dedupe_key"])
def test_r29_names_get_one_verdict(queue, db, argument):
    queue.enqueue("seen", {})
    refusal = f"^{argument} .*(at most {NAME}|control character)"
    verdicts, stored = {}, {}
    for case, value, _ in NAMES:
        options = {"kind": "k", "queue": "q", "dedupe_key": None, argument: value}
        kind = options.pop("kind")
        verdicts[case], made = verdict(db, refusal, queue.enqueue, kind, {}, **options)
        if made is not None:
            stored[case] = getattr(queue.get(made.id), argument) == value
        if argument != "dedupe_key":  # enqueue_many takes none
            del options["dedupe_key"]
            many, _ = verdict(db, refusal, queue.enqueue_many, kind, [{}], **options)
            assert many == verdicts[case], case
    assert verdicts == expected(NAMES)
    assert all(stored.values()), stored


def test_r29_worker_names_and_claim_filters_get_one_verdict(queue, db):
    refusal = f"^(worker|queue|kind) .*(at most {NAME}|control character)"
    verdicts = {}
    for case, value, _ in NAMES:
        queue.enqueue("k", {})
        assert verdict(db, refusal, queue.claim, "w", queues=[value])[1] in ([], None)
        assert verdict(db, refusal, queue.claim, "w", kinds=[value])[1] in ([], None)
        verdicts[case], claimed = verdict(db, refusal, queue.claim, value)
        if claimed is not None:
            (job,) = claimed
            assert queue.get(job.id).worker == value
            assert queue.complete(job)
        else:
            assert queue.complete(queue.claim("w")[0])
    assert verdicts == expected(NAMES)


def test_r29_payloads_get_one_verdict(make_queue, db):
    queue = make_queue(max_payload_bytes=PAYLOAD_BYTES)
    queue.enqueue("seen", {})
    refusal = f"^payload .*({DEPTH} levels|max_payload_bytes={PAYLOAD_BYTES})"
    verdicts = {}
    for case, payload, _ in PAYLOADS:
        verdicts[case], made = verdict(db, refusal, queue.enqueue, "k", payload)
        if made is not None:
            assert queue.get(made.id).payload == payload
        many, _ = verdict(db, refusal, queue.enqueue_many, "k", [{}, payload])
        assert many == verdicts[case], case
    assert verdicts == expected(PAYLOADS)


def test_r29_results_get_one_verdict(make_queue, db):
    queue = make_queue(max_result_bytes=RESULT_BYTES)
    refusal = f"^result .*({DEPTH} levels|max_result_bytes={RESULT_BYTES})"
    verdicts = {}
    for case, result, _ in RESULTS:
        queue.enqueue("k", {})
        (job,) = queue.claim("w")
        many, _ = verdict(db, refusal, queue.complete_many, [job], results=[result])
        verdicts[case], _ = verdict(db, refusal, queue.complete, job, result=result)
        assert many == verdicts[case], case
        snap = queue.get(job.id)
        if verdicts[case] == "stored":
            assert (snap.state, snap.result) == ("done", result)
        else:
            assert (snap.state, snap.result) == ("running", None)
            assert queue.complete(job)
    assert verdicts == expected(RESULTS)
