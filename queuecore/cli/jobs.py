"""`queuecore enqueue`, `show`, `cancel`, `jobs` and `workers`: try the queue, mend it
or look at its jobs, without Python.

Same exit codes as every command: 0 done, 2 the command line is wrong (bad JSON, a
bad option value), 1 anything else, including a job that could not be cancelled.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from queuecore.cli.common import UsageError, names, open_queue
from queuecore.errors import DedupeConflict

Command = Callable[..., Any]


def add_commands(command: Command, dsn: Callable[[argparse.ArgumentParser], None]) -> None:
    enqueue = command("enqueue", _enqueue, help="add jobs; prints each one's id")
    enqueue.add_argument("kind", metavar="KIND", help="which handler runs it")
    given = enqueue.add_mutually_exclusive_group()
    given.add_argument(
        "--payload", metavar="JSON", help="one job's payload, a JSON object (default: {})"
    )
    given.add_argument(
        "--file",
        metavar="F",
        help="many jobs: one JSON object a line, - for stdin, enqueued in batches of "
        f"{FILE_BATCH} (default: one job, --payload)",
    )
    enqueue.add_argument("--queue", default="default", help="the queue it waits in")
    enqueue.add_argument("--priority", type=int, default=0, help="lower runs first")
    enqueue.add_argument(
        "--delay", type=float, default=0.0, metavar="S", help="run in S seconds, not --file"
    )
    enqueue.add_argument(
        "--dedupe-key",
        metavar="KEY",
        help="enqueue at most once per key, not --file (default: no key)",
    )
    enqueue.add_argument(
        "--max-attempts",
        type=int,
        metavar="N",
        help="runs before it is dead (default: the queue's)",
    )
    dsn(enqueue)

    show = command("show", _show, help="one job: its state, attempts, errors and result")
    show.add_argument("id", type=int, metavar="ID", help="the job's id")
    show.add_argument("--json", action="store_true", help="print JSON for machines")
    dsn(show)

    cancel = command("cancel", _cancel, help="cancel queued or running jobs")
    cancel.add_argument("ids", nargs="+", type=int, metavar="ID", help="the jobs' ids")
    dsn(cancel)

    jobs = command("jobs", _jobs, help="list jobs by state, kind and queue, in id order")
    jobs.add_argument("--state", type=names, help="comma-separated states (default: all)")
    jobs.add_argument("--kind", type=names, help="comma-separated kinds (default: all)")
    jobs.add_argument("--queue", type=names, help="comma-separated queues (default: all)")
    jobs.add_argument(
        "--after",
        type=int,
        metavar="ID",
        help="only ids above ID, the next page (default: from the first)",
    )
    jobs.add_argument("--limit", type=int, default=100, help="at most this many")
    jobs.add_argument("--json", action="store_true", help="print JSON for machines")
    dsn(jobs)

    workers = command("workers", _workers, help="the workers seen in the last hour")
    workers.add_argument("--json", action="store_true", help="print JSON for machines")
    dsn(workers)


#: Payloads per transaction of `enqueue --file`: big enough that 2,000 take a few
#: commits, small enough that one batch's rows and locks stay short-lived.
FILE_BATCH = 500


def _payload(text: str, where: str = "--payload") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where} is not JSON ({exc}): {text[:200]!r}") from exc


def _payload_lines(stream: TextIO, name: str) -> list[Any]:
    """Every payload of a `--file`, read before anything is written, so a bad line 1,500
    leaves the queue as it was rather than half enqueued. Blank lines are skipped."""
    payloads = []
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        payload = _payload(line, f"{name} line {number}")
        if not isinstance(payload, dict):
            raise UsageError(f"{name} line {number} is not a JSON object: {line[:200]!r}")
        payloads.append(payload)
    return payloads


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _placed(args: argparse.Namespace) -> dict[str, Any]:
    """Where and how an enqueued job waits, one job or a file's worth."""
    return {"queue": args.queue, "priority": args.priority, "max_attempts": args.max_attempts}


def _enqueue_file(args: argparse.Namespace) -> int:
    if args.dedupe_key is not None or args.delay:
        raise UsageError("--dedupe-key and --delay are for one job: not with --file")
    if args.file == "-":
        payloads = _payload_lines(sys.stdin, "stdin")
    else:
        with open(args.file, encoding="utf-8") as stream:
            payloads = _payload_lines(stream, args.file)
    with open_queue(args) as queue:
        for batch in _batches(payloads, FILE_BATCH):
            ids = queue.enqueue_many(args.kind, batch, **_placed(args))
            print("\n".join(map(str, ids)), flush=True)
    print(f"enqueued {len(payloads)} job(s) of kind {args.kind!r}", file=sys.stderr)
    return 0


def _enqueue(args: argparse.Namespace) -> int:
    if args.file is not None:
        return _enqueue_file(args)
    payload = _payload(args.payload or "{}")
    with open_queue(args) as queue:
        try:
            res = queue.enqueue(
                args.kind, payload, delay=args.delay, dedupe_key=args.dedupe_key, **_placed(args)
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
    refused = 0
    with open_queue(args) as queue:
        for job_id in args.ids:
            if queue.cancel(job_id):
                print(f"cancelled job {job_id}")
                continue
            refused += 1
            snap = queue.get(job_id)
            why = "no such job" if snap is None else f"it is {snap.state} already"
            print(f"job {job_id} not cancelled: {why}", file=sys.stderr)
    return 1 if refused else 0


def _show(args: argparse.Namespace) -> int:
    with open_queue(args) as queue:
        snap = queue.get(args.id)
    if snap is None:
        print(f"queuecore show: no job {args.id}", file=sys.stderr)
        return 1
    shown = snapshot_fields(snap)
    if args.json:
        print(json.dumps(shown, indent=2))
        return 0
    lines = [
        f"job {snap.id}: {snap.state}",
        f"  kind        {snap.kind}",
        f"  queue       {snap.queue} (priority {snap.priority})",
        f"  attempts    {snap.attempts} of {snap.max_attempts}",
        f"  created     {shown['created_at']}",
        *_visible_at_line(snap.state, shown["visible_at"]),
        f"  finished    {shown['finished_at'] or '-'}",
        f"  worker      {snap.worker or '-'}",
        f"  dedupe key  {snap.dedupe_key or '-'}",
        f"  payload     {json.dumps(snap.payload)}",
        f"  result      {'-' if snap.result is None else json.dumps(snap.result)}",
    ]
    lines.append(f"  errors      {len(snap.errors) or '-'}")
    for error in shown["errors"]:
        lines.append(f"    attempt {error['attempt']} at {error['at']}:")
        lines.extend(f"      {line}" for line in str(error["error"]).splitlines() or [""])
    from queuecore.observe.terminal import printable

    print("\n".join(printable(line) for line in lines))
    return 0


def _visible_at_line(state: str, visible_at: str | None) -> list[str]:
    """What `visible_at` means for this job, said as such: when a queued job may run,
    when a running job's lease ends (ADR 0001); nothing for a finished one, whose column
    still holds the end of its last lease."""
    if state == "queued":
        return [f"  runs from   {visible_at}"]
    if state == "running":
        return [f"  lease ends  {visible_at}"]
    return []


def snapshot_fields(snap: Any) -> dict[str, Any]:
    """A `JobSnapshot` as JSON-ready fields: times as ISO 8601 strings (UTC)."""
    times = ("created_at", "visible_at", "finished_at")
    fields = {
        name: getattr(snap, name)
        for name in (*LISTED, "priority", "payload", "worker", "dedupe_key", "result")
    }
    for name in times:
        value = getattr(snap, name)
        fields[name] = None if value is None else value.isoformat()
    fields["errors"] = [
        {
            **error,
            "at": error["at"].isoformat() if hasattr(error["at"], "isoformat") else error["at"],
        }
        for error in snap.errors
    ]
    return fields


#: What `queuecore jobs --json` prints of each job. Payloads are left out on purpose, as
#: in `dead list`: they may hold secrets.
LISTED = ("id", "kind", "queue", "state", "attempts", "max_attempts", "last_error")


def _jobs(args: argparse.Namespace) -> int:
    from queuecore.observe.tables import render

    with open_queue(args) as queue:
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
    from queuecore.observe.worklog import first_line

    return first_line(error or "")[:60]


def _workers(args: argparse.Namespace) -> int:
    from queuecore.observe.tables import render

    with open_queue(args) as queue:
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
