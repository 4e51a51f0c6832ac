"""An application as its author writes it: the DSN comes from QUEUECORE_DSN, and the code
passes the same options whatever the backend (SQLite's and PostgreSQL's own among them).

    python -m tests.swap.app enqueue '[{"kind": "work", "payload": {}, "key": "k", "delay": 0}]'
    python -m tests.swap.app status ID...
    python -m tests.swap.app stats
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import queuecore

OPTIONS = {
    "lease_seconds": 2,
    "max_attempts": 3,
    "backoff_base": 0.1,
    "backoff_cap": 0.5,
    "synchronous": "NORMAL",  # SQLite's
    "busy_timeout": 10,  # SQLite's
    "notify": True,  # PostgreSQL's
    "pool_size": 5,
}


def run(queue: queuecore.Queue, command: str, rest: list[str]) -> Any:
    if command == "enqueue":
        results = []
        for job in json.loads(rest[0]):
            result = queue.enqueue(
                job["kind"],
                job["payload"],
                dedupe_key=job.get("key"),
                delay=job.get("delay", 0),
            )
            results.append({"id": result.id, "created": result.created})
        return results
    if command == "status":
        fields = ("id", "kind", "payload", "dedupe_key", "state")
        snaps = [queue.get(int(job_id)) for job_id in rest]
        return [None if s is None else {f: getattr(s, f) for f in fields} for s in snaps]
    stats = queue.stats()
    return {k: stats[k] for k in ("queued", "running", "dead")}


def main(argv: list[str]) -> None:
    with queuecore.connect(os.environ["QUEUECORE_DSN"], **OPTIONS) as queue:
        print(json.dumps(run(queue, argv[0], argv[1:])))


if __name__ == "__main__":
    main(sys.argv[1:])
