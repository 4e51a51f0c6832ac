"""The demo's verdict, read from the database once nothing is left running: each kind
of job ended the way it must (see `Kind.ended_right`), nothing was lost, and every
worker stopped cleanly."""

from __future__ import annotations

import signal
from collections import Counter
from dataclasses import dataclass
from typing import IO, Any

from sqlalchemy import and_, func, select

from queuecore.demo.jobs import KINDS, ledger
from queuecore.demo.pool import WorkerPool
from queuecore.observe.tables import render
from queuecore.protocol import Queue
from queuecore.sql.schema import jobs


@dataclass
class KindVerdict:
    row: list[object]
    passed: bool


def verdict(
    out: IO[str],
    queue: Queue,
    queue_name: str,
    kinds: dict[int, str],
    elapsed: float,
    pool: WorkerPool,
    stop_codes: list[int],
) -> bool:
    found = outcomes(queue, queue_name)
    judged = [_judge(kind, [r for r in found if r["kind"] == kind.name]) for kind in KINDS]
    finished = sum(1 for r in found if r["state"] in ("done", "dead"))
    lost = len(kinds) - len(found)
    unfinished = len(found) - finished
    # A poison job kills only its handler process (W7); the worker it runs for goes on.
    poison_kills = sum(r["attempts"] for r in found if r["kind"] == "poison")
    crashed = sum(n for code, n in pool.exits.items() if code != -signal.SIGKILL)
    # -SIGTERM: still starting up, before the worker's handler was in place; nothing claimed.
    unclean_stops = sum(1 for code in stop_codes if code not in (0, -signal.SIGTERM))
    headers = ["kind", "jobs", "done", "dead", "attempts:jobs", "ledger rows:jobs", "expected"]
    print("\n" + render([*headers, "result"], [v.row for v in judged]), file=out)
    print(
        f"\n{finished} of {len(kinds)} jobs finished in {elapsed:.1f}s: "
        f"{finished / elapsed if elapsed else 0:.1f} jobs/s. Worker processes killed by "
        f"the demo: {pool.killed}; handler processes killed by poison jobs: about "
        f"{poison_kills}; {len(stop_codes)} workers stopped by SIGTERM at the end.",
        file=out,
    )
    problems = [f"kind {v.row[0]} is not as expected" for v in judged if not v.passed]
    if lost:
        problems.append(f"{lost} job(s) lost")
    if unfinished:
        problems.append(f"{unfinished} job(s) never finished")
    if crashed:
        problems.append(f"{crashed} worker(s) exited on their own")
    if unclean_stops:
        problems.append(f"{unclean_stops} worker(s) did not stop cleanly on SIGTERM")
    if problems:
        print("VERDICT: FAIL: " + "; ".join(problems), file=out)
        return False
    print(
        "VERDICT: PASS: every job that can succeed is done with exactly one ledger row; every "
        "hopeless or poison job is dead after exactly its max attempts; nothing lost or left "
        "running.",
        file=out,
    )
    return True


def outcomes(queue: Queue, queue_name: str) -> list[dict[str, Any]]:
    """Every job of the run with its state and attempts as the queue reports them, and
    how many ledger rows it wrote. Read through `get`, not from the rows: a job whose
    lease ended on its last attempt is dead (R08) before any claim writes it so, and the
    run may end, its stats saying nothing is left, before one does."""
    ledger_rows = (
        select(func.count())
        .where(and_(ledger.c.job_id == jobs.c.id, ledger.c.queue == jobs.c.queue))
        .scalar_subquery()
        .label("ledger")
    )
    stmt = select(jobs.c.id, ledger_rows).where(jobs.c.queue == queue_name)
    with queue.engine.connect() as conn:
        counted = conn.execute(stmt).all()
    found = []
    for job_id, rows in counted:
        snap = queue.get(job_id)
        if snap is not None:  # one gone since counts as lost
            found.append(
                {
                    "id": job_id,
                    "kind": snap.kind,
                    "state": snap.state,
                    "attempts": snap.attempts,
                    "max_attempts": snap.max_attempts,
                    "ledger": rows,
                }
            )
    return found


def _judge(kind: Any, rows: list[dict[str, Any]]) -> KindVerdict:
    done = [r for r in rows if r["state"] == "done"]
    dead = [r for r in rows if r["state"] == "dead"]
    passed = all(kind.ended_right(r["state"], r["attempts"], r["ledger"]) for r in rows)
    expected = (
        "done, 1 ledger row" if kind.succeeds else f"dead at {kind.max_attempts} attempts, no row"
    )
    row = [
        kind.name,
        len(rows),
        len(done),
        len(dead),
        _spread(r["attempts"] for r in rows),
        _spread(r["ledger"] for r in rows),
        expected,
        "PASS" if passed else "FAIL",
    ]
    return KindVerdict(row, passed)


def _spread(values: Any) -> str:
    """`1:98 2:2`: 98 jobs had the value 1, two had 2."""
    counts = Counter(values)
    return " ".join(f"{v}:{n}" for v, n in sorted(counts.items())) or "-"
