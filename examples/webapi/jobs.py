"""The example's handlers, run by `queuecore worker examples.webapi.jobs:REGISTRY`.

Each shows one thing a handler can say: a result (a JSON value, returned), a failure
worth retrying (an exception), one that retrying cannot fix (`Permanent`), and a long
job that stops early when its lease is lost (cancelled from the API, say).
"""

from __future__ import annotations

from typing import Any

import queuecore

REGISTRY = queuecore.Registry()


@REGISTRY.handler("thumbnail")
def thumbnail(job: queuecore.Job) -> dict[str, Any]:
    """Fits an image into a box; the answer is the job's result."""
    width, height, box = job.payload["width"], job.payload["height"], job.payload["box"]
    scale = min(box / width, box / height, 1.0)
    return {"width": round(width * scale), "height": round(height * scale)}


@REGISTRY.handler("flaky")
def flaky(job: queuecore.Job) -> dict[str, Any]:
    """An upstream that fails the first `fail_times` attempts: the queue retries it."""
    if job.attempts <= job.payload["fail_times"]:
        raise ConnectionError(f"upstream unavailable (attempt {job.attempts})")
    return {"succeeded_on_attempt": job.attempts}


@REGISTRY.handler("invoice")
def invoice(job: queuecore.Job) -> dict[str, Any]:
    """Refuses bad input for good: no retry can make a negative amount right."""
    if job.payload["amount"] < 0:
        raise queuecore.Permanent(f"amount must not be negative: {job.payload['amount']}")
    return {"invoice": f"INV-{job.id:06d}", "amount": job.payload["amount"]}


@REGISTRY.handler("export")
def export(job: queuecore.Job) -> dict[str, Any] | None:
    """Long work in steps; it stops as soon as the job is lost (cancelled, or its lease
    taken over), since whatever it returned then would be refused anyway."""
    lost = queuecore.current_lease().lost
    for _ in range(job.payload["steps"]):
        if lost.wait(job.payload["step_seconds"]):
            return None
    return {"rows": job.payload["steps"] * 100}
