"""Reading periodic jobs behind the queue's back, and starting worker processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

from queuecore.sql.schema import jobs
from tests.worker.processes import REPO, queuecore_command, queuecore_env


def periodic_rows(dsn: str, name: str) -> list[tuple[float, str, int]]:
    """(tick, state, attempts) of the jobs of schedule `name`, oldest tick first."""
    prefix = f"periodic:{name}:"
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(jobs.c.dedupe_key, jobs.c.state, jobs.c.attempts).where(
                    jobs.c.dedupe_key.like(f"{prefix}%")
                )
            ).all()
    finally:
        engine.dispose()
    return sorted(
        (datetime.fromisoformat(key[len(prefix) :].replace("Z", "+00:00")).timestamp(), s, a)
        for key, s, a in rows
    )


def done_ticks(dsn: str, name: str) -> list[float]:
    return [tick for tick, state, _ in periodic_rows(dsn, name) if state == "done"]


@contextmanager
def workers(
    count: int, args: Callable[[int], list[str]], logs: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` worker processes, `args(i)` their command lines, logging into the folder
    `logs` (made here); killed if left running."""
    logs.mkdir(parents=True)
    with ExitStack() as stack:
        procs = []
        for i in range(count):
            out = stack.enter_context(open(logs / f"worker-{i}.log", "ab"))
            proc = subprocess.Popen(
                args(i),
                cwd=REPO,
                env=queuecore_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            stack.callback(lambda p=proc: p.poll() is None and (p.kill(), p.wait()))
            procs.append(proc)
        yield procs


def cli_worker(registry: str, dsn: str) -> list[str]:
    return queuecore_command(
        "worker", registry, "--dsn", dsn, "--ack-batch", "1", "--poll-interval", "0.2"
    )


def clocked_worker(dsn: str, clock_file: Path) -> list[str]:
    return [sys.executable, "-m", "tests.periodic.clocked_worker", dsn, str(clock_file)]


def stop(procs: list[subprocess.Popen[bytes]], logs: Path) -> None:
    """SIGTERM every worker once it has started (before that, its handler for the signal
    is not in place yet); each must exit 0 (W4)."""
    started = [logs / f"worker-{i}.log" for i in range(len(procs))]
    wait_for(lambda: all(" started: " in log.read_text() for log in started), procs, logs)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(timeout=60) == 0, f"exit {proc.returncode}\n{logs_text(logs)}"


def wait_for(
    condition: Callable[[], bool],
    procs: list[subprocess.Popen[bytes]],
    logs: Path,
    timeout: float = 60,
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert all(p.poll() is None for p in procs), f"a worker ended:\n{logs_text(logs)}"
        assert time.monotonic() < deadline, f"timed out; the workers said:\n{logs_text(logs)}"
        time.sleep(0.05)


def logs_text(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(logs.glob("*.log")))
