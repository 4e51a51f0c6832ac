"""`queuecore demo`: a live run that shows what the queue survives, then a verdict.

It enqueues a mix of jobs (see `queuecore.demo_jobs`), runs a pool of real worker
processes started through the command line, SIGKILLs one now and then and starts a
new one, and checks the outcome from the database: every job that can succeed is done
with exactly one ledger row; every hopeless or poison job is dead after exactly its
max attempts; nothing is lost or left running.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Engine, and_, func, select

from queuecore import validate
from queuecore.connect import connect, to_url
from queuecore.demo_jobs import KINDS, enqueue_mix, ledger
from queuecore.schema import jobs
from queuecore.table import render

REGISTRY_SPEC = "queuecore.demo_jobs:REGISTRY"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn",
        help="database to run on (default: a new SQLite file in a temporary folder); "
        "the demo adds a ledger table and uses a queue of its own",
    )
    parser.add_argument("--jobs", type=int, default=200, help="how many (default 200)")
    parser.add_argument("--workers", type=int, default=6, help="worker processes (default 6)")
    parser.add_argument("--concurrency", type=int, default=2, help="jobs at once per worker")
    parser.add_argument("--lease-seconds", type=float, default=2.0, help="default 2")
    parser.add_argument(
        "--kill-every",
        type=float,
        default=3.0,
        metavar="S",
        help="SIGKILL a worker every ~S s (0: never)",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after (s)")
    parser.add_argument("--seed", type=int, default=None, help="the mix's order and the kills")
    parser.add_argument("--keep", action="store_true", help="keep the folder with db and logs")


def main(args: argparse.Namespace) -> int:
    validate.at_least("--workers", args.workers, 1)
    validate.at_least("--concurrency", args.concurrency, 1)
    validate.non_negative_seconds("--kill-every", args.kill_every)
    validate.at_least("--jobs", args.jobs, len(KINDS))  # one of each kind at least
    folder = Path(tempfile.mkdtemp(prefix="queuecore-demo-"))
    dsn = args.dsn or f"sqlite:///{folder / 'queuecore-demo.db'}"
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    try:
        passed = run(
            dsn,
            folder,
            total=args.jobs,
            workers=args.workers,
            concurrency=args.concurrency,
            lease_seconds=args.lease_seconds,
            kill_every=args.kill_every,
            timeout=args.timeout,
            seed=seed,
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # it never got to a verdict
        raise
    if passed and not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        print(f"database and worker logs kept in {folder}")
    return 0 if passed else 1


class WorkerPool:
    """`size` worker processes started through the real command line; the chaos comes
    from outside, as it would in production: SIGKILL, and a new process in its place."""

    def __init__(self, argv: list[str], size: int, log: IO[bytes], *, dsn: str) -> None:
        self.argv, self.size, self.log = argv, size, log
        self.env = {**os.environ, "QUEUECORE_DSN": dsn}  # not in argv, where `ps` shows it
        self.procs: list[subprocess.Popen[bytes]] = []
        self.killed = 0  # by us
        self.exits: Counter[int] = Counter()  # return codes of processes that ended early

    def start(self) -> None:
        self.procs = [self._spawn() for _ in range(self.size)]

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def replace_ended(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                self.exits[proc.returncode] += 1
                self.procs[i] = self._spawn()

    def kill_one(self, rng: random.Random) -> None:
        """SIGKILL a random worker, and start another in its place."""
        i = rng.randrange(len(self.procs))
        victim = self.procs[i]
        if victim.poll() is None:
            victim.kill()
            self.killed += 1
        self.exits[victim.wait()] += 1
        self.procs[i] = self._spawn()

    def stop(self, grace: float = 15.0) -> list[int]:
        """SIGTERM every live worker (W4) and wait; returns their exit codes (0: graceful)."""
        live = []
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.send_signal(signal.SIGCONT)  # a frozen one must run to hear it
                live.append(proc)
            else:
                self.exits[proc.returncode] += 1
        deadline = time.monotonic() + grace
        codes = []
        for proc in live:
            try:
                codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        return codes


def worker_command(
    queue_name: str,
    concurrency: int,
    lease_seconds: float,
    sqlite_driver: str | None = None,
) -> list[str]:
    """The worker exactly as a person would start it, with short leases and backoff."""
    driver = ["--sqlite-driver", sqlite_driver] if sqlite_driver else []
    return [
        sys.executable,
        "-m",
        "queuecore",
        "worker",
        REGISTRY_SPEC,
        "--queues",
        queue_name,
        "--concurrency",
        str(concurrency),
        "--lease-seconds",
        str(lease_seconds),
        "--backoff-base",
        "0.1",
        "--backoff-cap",
        "0.5",
        "--poll-interval",
        "0.25",
        "--grace-seconds",
        "5",
        *driver,
    ]


def fixed_sqlite_driver(dsn: str) -> str | None:
    """ "pysqlite3" when the DSN is SQLite, the stdlib's SQLite has the WAL-reset bug (many
    worker processes writing at once is exactly its pattern) and pysqlite3 is installed
    with a fixed one; None: the default driver will do, or nothing better is at hand."""
    if to_url(dsn).get_backend_name() != "sqlite":
        return None
    import sqlite3

    from queuecore.backends.sqlite import has_wal_reset_fix

    if has_wal_reset_fix(sqlite3.sqlite_version_info):
        return None
    try:
        from pysqlite3 import dbapi2 as pysqlite3
    except ModuleNotFoundError:
        return None
    return "pysqlite3" if has_wal_reset_fix(pysqlite3.sqlite_version_info) else None


class Progress:
    """A bar that redraws itself on a terminal; a plain line every few seconds elsewhere."""

    def __init__(self, total: int, out: IO[str]) -> None:
        self.total, self.out = total, out
        self.tty = out.isatty()
        self.last_line = 0.0

    def show(self, elapsed: float, done: int, dead: int, running: int, kills: int) -> None:
        finished = done + dead
        text = (
            f"{finished:>5}/{self.total} finished (done {done}, dead {dead}), "
            f"running {running}, workers killed {kills}, {elapsed:5.1f}s"
        )
        if self.tty:
            filled = int(30 * finished / self.total) if self.total else 30
            self.out.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}\033[K")
            self.out.flush()
        elif elapsed - self.last_line >= 3 or finished == self.total:
            self.last_line = elapsed
            print(f"  {text}", file=self.out, flush=True)

    def close(self) -> None:
        if self.tty:
            self.out.write("\n")


def run(
    dsn: str,
    folder: Path,
    *,
    total: int,
    workers: int,
    concurrency: int,
    lease_seconds: float,
    kill_every: float,
    timeout: float,
    seed: int,
    out: IO[str] = sys.stdout,
) -> bool:
    """The whole demo on `dsn`; True when the verdict is PASS. Logs go to `folder`."""
    rng = random.Random(seed)
    queue_name = f"demo-{seed:x}-{int(time.time())}"  # its own queue: a shared database is fine
    driver = fixed_sqlite_driver(dsn)
    queue: Any = connect(
        dsn, lease_seconds=lease_seconds, **({"sqlite_driver": driver} if driver else {})
    )
    try:
        ledger.create(queue.engine, checkfirst=True)
        kinds = enqueue_mix(
            queue,
            queue.engine,
            total,
            queue_name=queue_name,
            lease_seconds=lease_seconds,
            seed=seed,
        )
        _introduce(out, dsn, kinds, workers, concurrency, lease_seconds, kill_every)
        with open(folder / "workers.log", "ab") as log:
            command = worker_command(queue_name, concurrency, lease_seconds, driver)
            pool = WorkerPool(command, workers, log, dsn=dsn)
            try:
                elapsed = supervise(
                    queue, queue_name, len(kinds), pool, rng, kill_every, timeout, out
                )
            finally:
                stop_codes = pool.stop()
        return _verdict(out, queue.engine, queue_name, kinds, elapsed, pool, stop_codes)
    finally:
        queue.close()


def _introduce(
    out: IO[str],
    dsn: str,
    kinds: dict[int, str],
    workers: int,
    concurrency: int,
    lease_seconds: float,
    kill_every: float,
) -> None:
    counts = Counter(kinds.values())
    where = to_url(dsn).render_as_string(hide_password=True)
    print(f"queuecore demo: {len(kinds)} jobs on {where}", file=out)
    print(
        f"{workers} worker processes ({concurrency} jobs at once each), started as "
        f"`queuecore worker {REGISTRY_SPEC}`; leases of {lease_seconds:g}s"
        + (f"; a random worker is SIGKILLed about every {kill_every:g}s" if kill_every else ""),
        file=out,
    )
    rows = [[k.name, counts[k.name], k.max_attempts, k.what] for k in KINDS]
    print(render(["kind", "jobs", "max attempts", "what it does"], rows) + "\n", file=out)


def supervise(
    queue: Any,
    queue_name: str,
    total: int,
    pool: WorkerPool,
    rng: random.Random,
    kill_every: float,
    timeout: float,
    out: IO[str],
) -> float:
    """Start the pool, keep it full, kill a worker now and then, until no job of the queue
    is left unfinished (or `timeout`); returns the seconds it took."""
    progress = Progress(total, out)
    started = time.monotonic()
    next_kill = started + kill_every
    pool.start()
    try:
        while True:
            now = time.monotonic()
            stats = queue.stats(queue_name)
            unfinished = stats["queued"] + stats["running"]
            done = total - unfinished - stats["dead"]
            progress.show(now - started, done, stats["dead"], stats["running"], pool.killed)
            if unfinished == 0 or now - started > timeout:
                return now - started
            pool.replace_ended()
            if kill_every and now >= next_kill:
                pool.kill_one(rng)
                next_kill = now + rng.uniform(0.5, 1.5) * kill_every
            time.sleep(0.1)
    finally:
        progress.close()


@dataclass
class KindVerdict:
    row: list[object]
    passed: bool


def _verdict(
    out: IO[str],
    engine: Engine,
    queue_name: str,
    kinds: dict[int, str],
    elapsed: float,
    pool: WorkerPool,
    stop_codes: list[int],
) -> bool:
    found = outcomes(engine, queue_name)
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


def outcomes(engine: Engine, queue_name: str) -> list[dict[str, Any]]:
    """Every job of the run with its state, attempts and how many ledger rows it wrote."""
    ledger_rows = (
        select(func.count())
        .where(and_(ledger.c.job_id == jobs.c.id, ledger.c.queue == jobs.c.queue))
        .scalar_subquery()
        .label("ledger")
    )
    stmt = select(
        jobs.c.id, jobs.c.kind, jobs.c.state, jobs.c.attempts, jobs.c.max_attempts, ledger_rows
    ).where(jobs.c.queue == queue_name)
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(stmt)]


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
