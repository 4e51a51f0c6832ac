"""The body of one racing process of the R04 test. It lives in its own module because
a spawned process imports its target by name: the test module itself would drag in
pytest's fixtures."""

from __future__ import annotations

from typing import Any

import queuecore


def drain(dsn: str, name: str, limit: int, start: Any, results: Any) -> None:
    """Claim and complete until nothing is left; report (id, token, completed) for each
    job, and any error as text, so the test never waits for a process that died."""
    seen: list[tuple[int, str, bool]] = []
    try:
        with queuecore.connect(dsn, lease_seconds=600) as queue:
            start.wait(timeout=60)
            while jobs := queue.claim(name, limit=limit):
                seen.extend((job.id, job.lease_token, queue.complete(job)) for job in jobs)
    except Exception as exc:  # reported to the test, which fails with it
        results.put((name, seen, f"{type(exc).__name__}: {exc}"))
    else:
        results.put((name, seen, None))
