"""Starting real `queuecore` processes from tests, the way a person would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def queuecore_env() -> dict[str, str]:
    """Never a DSN from the developer's shell; the repository importable, so
    `tests.worker.handlers:REGISTRY` is found as an application's module would be."""
    env = {k: v for k, v in os.environ.items() if k != "QUEUECORE_DSN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def queuecore_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "queuecore", *args]


@contextmanager
def queuecore_process(
    *args: str, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`queuecore ARGS...` in the background, its output in `log`; killed if the test
    leaves it running."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            queuecore_command(*args),
            cwd=REPO,
            env=queuecore_env() if env is None else env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    with reaped(proc):
        yield proc


@contextmanager
def reaped(proc: subprocess.Popen[Any]) -> Iterator[None]:
    """Kills `proc` at the end of the block if it still runs there, and waits for it."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_until(
    condition: Callable[[], object], proc: subprocess.Popen[bytes], log: Path, timeout: float = 30
) -> None:
    """Wait for `condition` while the process lives; on failure, show its log."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the process ended early:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"timed out; the process said:\n{log.read_text()}"
        time.sleep(0.02)


def run_queuecore(
    *args: str, timeout: float = 120, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `queuecore ARGS...` to its end, `input` on its stdin."""
    return subprocess.run(
        queuecore_command(*args),
        input=input,
        cwd=REPO,
        env=queuecore_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def claim_while_frozen(
    worker: subprocess.Popen[bytes], claim: Callable[[], list[Any]], lease: float
) -> list[Any]:
    """SIGSTOP the worker (not its handler processes) until `claim` takes a job whose
    lease the frozen worker could not renew; SIGCONT it whatever happens."""
    worker.send_signal(signal.SIGSTOP)
    try:
        stolen: list[Any] = []
        deadline = time.monotonic() + 30
        while not stolen and time.monotonic() < deadline:
            time.sleep(lease / 2)
            stolen = claim()
        return stolen
    finally:
        worker.send_signal(signal.SIGCONT)
