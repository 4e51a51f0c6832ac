"""`queuecore enqueue`, `queuecore cancel` and `queuecore jobs`: try the queue, mend it
or look at its jobs, without Python.

Same exit codes as every command: 0 done, 2 the command line is wrong (bad JSON, a
bad option value), 1 anything else, including a job that could not be cancelled.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from queuecore.errors import DedupeConflict

Command = Callable[..., Any]


def add_commands(command: Command, dsn: Callable[[argparse.ArgumentParser], None]) -> None:
    enqueue = command("enqueue", _enqueue, help="add one job; prints its id")
    enqueue.add_argument("kind", metavar="KIND", help="which handler runs it")
    enqueue.add_argument(
        "--payload", default="{}", metavar="JSON", help="a JSON object (default {})"
    )
    enqueue.add_argument("--queue", default="default", help="default: default")
    enqueue.add_argument("--priority", type=int, default=0, help="lower runs first (default 0)")
    enqueue.add_argument("--delay", type=float, default=0.0, metavar="S", help="run in S seconds")
    enqueue.add_argument("--dedupe-key", metavar="KEY", help="enqueue at most once per key")
    enqueue.add_argument("--max-attempts", type=int, metavar="N", help="default: the queue's")
    dsn(enqueue)

    cancel = command("cancel", _cancel, help="cancel queued or running jobs")
    cancel.add_argument("ids", nargs="+", type=int, metavar="ID")
    dsn(cancel)

    jobs = command("jobs", _jobs, help="list jobs by state, kind and queue, in id order")
    jobs.add_argument("--state", type=_names, help="comma-separated states (default: all)")
    jobs.add_argument("--kind", type=_names, help="comma-separated kinds (default: all)")
    jobs.add_argument("--queue", type=_names, help="comma-separated queues (default: all)")
    jobs.add_argument("--after", type=int, metavar="ID", help="only ids above ID (the next page)")
    jobs.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    jobs.add_argument("--json", action="store_true", help="print JSON for machines")
    dsn(jobs)

    workers = command("workers", _workers, help="the workers seen in the last hour")
    workers.add_argument("--json", action="store_true", help="print JSON for machines")
    dsn(workers)


def _payload(text: str) -> Any:
    from queuecore.cli import UsageError

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--payload is not JSON ({exc}): {text!r}") from exc


def _enqueue(args: argparse.Namespace) -> int:
    from queuecore.cli import _open

    payload = _payload(args.payload)
    with _open(args) as queue:
        try:
            res = queue.enqueue(
                args.kind,
                payload,
                queue=args.queue,
                priority=args.priority,
                delay=args.delay,
                max_attempts=args.max_attempts,
                dedupe_key=args.dedupe_key,
            )
        except DedupeConflict as exc:
            print(f"queuecore enqueue: {exc}", file=sys.stderr)
            return 1
    print(res.id)
    if not res.created:
        print(
            f"job {res.id} already had dedupe key {args.dedupe_key!r}: nothing new enqueued",
            file=sys.stderr,
        )
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from queuecore.cli import _open

    refused = 0
    with _open(args) as queue:
        for job_id in args.ids:
            if queue.cancel(job_id):
                print(f"cancelled job {job_id}")
                continue
            refused += 1
            snap = queue.get(job_id)
            why = "no such job" if snap is None else f"it is {snap.state} already"
            print(f"job {job_id} not cancelled: {why}", file=sys.stderr)
    return 1 if refused else 0


def _names(text: str) -> list[str]:
    from queuecore.cli import _names as names

    return names(text)


#: What `queuecore jobs --json` prints of each job. Payloads are left out on purpose, as
#: in `dead list`: they may hold secrets.
LISTED = ("id", "kind", "queue", "state", "attempts", "max_attempts", "last_error")


def _jobs(args: argparse.Namespace) -> int:
    from queuecore.cli import UsageError, _open
    from queuecore.table import render

    with _open(args) as queue:
        try:
            listed = queue.list_jobs(
                state=args.state,
                kind=args.kind,
                queue=args.queue,
                after_id=args.after,
                limit=args.limit,
            )
        except (ValueError, TypeError) as exc:
            raise UsageError(str(exc)) from exc
    if args.json:
        print(json.dumps([{f: getattr(j, f) for f in LISTED} for j in listed], indent=2))
        return 0
    if not listed:
        print("no such jobs")
        return 0
    rows = [
        [j.id, j.kind, j.queue, j.state, f"{j.attempts}/{j.max_attempts}", _line(j.last_error)]
        for j in listed
    ]
    print(render(["id", "kind", "queue", "state", "attempts", "last error"], rows))
    if len(listed) == args.limit:
        print(f"\nnext page: queuecore jobs ... --after {listed[-1].id}")
    return 0


def _line(error: str | None) -> str:
    from queuecore.worklog import first_line

    return first_line(error or "")[:60]


def _workers(args: argparse.Namespace) -> int:
    from queuecore.cli import _open
    from queuecore.table import render

    with _open(args) as queue:
        seen = queue.workers()
    if args.json:
        listed = [
            {
                **{f: getattr(w, f) for f in WORKER_FIELDS},
                "started_at": w.started_at.isoformat(),
                "last_seen_at": w.last_seen_at.isoformat(),
            }
            for w in seen
        ]
        print(json.dumps(listed, indent=2))
        return 0
    if not seen:
        print("no worker seen in the last hour")
        return 0
    rows = [
        [
            w.name,
            "gone" if w.gone else "alive",
            f"{w.host}:{w.pid}",
            ",".join(w.queues) if w.queues is not None else "(all)",
            ",".join(w.kinds),
            f"{w.running}/{w.concurrency}",
            f"{w.started_at:%Y-%m-%d %H:%M:%S}",
            f"{w.last_seen_at:%H:%M:%S}",
        ]
        for w in seen
    ]
    headers = ["name", "state", "host:pid", "queues", "kinds", "held/slots", "started (UTC)"]
    print(render([*headers, "last seen"], rows))
    return 0


WORKER_FIELDS = ("name", "host", "pid", "queues", "kinds", "concurrency", "running", "gone")
