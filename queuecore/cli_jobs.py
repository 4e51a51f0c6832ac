"""`queuecore enqueue` and `queuecore cancel`: try the queue, or mend it, without Python.

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
