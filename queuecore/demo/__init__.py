"""`queuecore demo`: a live run that shows what the queue survives, then a verdict.

It enqueues a mix of jobs (see `queuecore.demo.jobs`), runs a pool of real worker
processes started through the command line (`queuecore.demo.pool`), SIGKILLs one now
and then and starts a new one, and checks the outcome from the database
(`queuecore.demo.verdict`): every job that can succeed is done with exactly one ledger
row; every hopeless or poison job is dead after exactly its max attempts; nothing is
lost or left running.

The demo is a subpackage of its own so that nothing of it is imported by the queue or
the worker at run time; only the `demo` command loads it.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

from queuecore.connect import connect, to_url
from queuecore.core import validate
from queuecore.core.dsn import shown
from queuecore.demo.jobs import KINDS, enqueue_mix, ledger
from queuecore.demo.pool import (
    REGISTRY_SPEC,
    WorkerPool,
    fixed_sqlite_driver,
    supervise,
    worker_command,
)
from queuecore.demo.verdict import verdict
from queuecore.observe.tables import render


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
    parser.add_argument(
        "--seed", type=int, default=None, help="the mix's order and the kills (default: random)"
    )
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
        return verdict(out, queue, queue_name, kinds, elapsed, pool, stop_codes)
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
    where = shown(to_url(dsn))
    print(f"queuecore demo: {len(kinds)} jobs on {where}", file=out)
    print(
        f"{workers} worker processes ({concurrency} jobs at once each), started as "
        f"`queuecore worker {REGISTRY_SPEC}`; leases of {lease_seconds:g}s"
        + (f"; a random worker is SIGKILLed about every {kill_every:g}s" if kill_every else ""),
        file=out,
    )
    rows = [[k.name, counts[k.name], k.max_attempts, k.what] for k in KINDS]
    print(render(["kind", "jobs", "max attempts", "what it does"], rows) + "\n", file=out)
