"""The demo's process machinery: a pool of real `queuecore worker` processes started
through the command line, killed and replaced from outside as production would, and the
loop that keeps it full until the demo's queue is empty.

The chaos and fault tests drive the same pool on purpose: what they prove about the
demo's mix is then what a person running `queuecore demo` sees.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import IO, Any

from queuecore.connect import to_url

REGISTRY_SPEC = "queuecore.demo.jobs:REGISTRY"


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
