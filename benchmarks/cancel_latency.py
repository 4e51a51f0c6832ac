"""How soon a running handler hears of a cancel (W9), per backend:

    python -m benchmarks.cancel_latency DSN [DSN ...] [--rounds 5]

One `queuecore worker` (every default, but a 300 s lease, so that its heartbeat, every
100 s, cannot be what tells the handler) runs a handler that waits on
`current_lease().lost` and writes down the wall-clock time it heard; this process
cancels the job once the handler started, and prints the time from `cancel()`
returning to the handler hearing it: median and worst of the rounds. Each DSN must
name a migrated database the run may fill (SQLite: a file it may create).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import queuecore
from queuecore import Job, Registry, current_lease

REGISTRY = Registry()
QUEUE = "cancel-latency"


@REGISTRY.handler("watch-cancel")
def watch_cancel(job: Job) -> None:
    """Says it started, then writes the time it heard that its job was lost."""
    Path(job.payload["started"]).touch()
    if current_lease().lost.wait(60):
        Path(job.payload["seen"]).write_text(repr(time.time()))


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.005)


def measure(dsn: str, rounds: int, folder: Path) -> list[float]:
    queue = queuecore.connect(dsn, lease_seconds=300)
    command = [
        *(sys.executable, "-m", "queuecore", "worker", "benchmarks.cancel_latency:REGISTRY"),
        *("--queues", QUEUE, "--lease-seconds", "300", "--log-level", "WARNING"),
    ]
    env = {**os.environ, "QUEUECORE_DSN": dsn}
    latencies = []
    with open(folder / "worker.log", "ab") as log:
        worker = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            for i in range(rounds):
                started, seen = folder / f"started-{i}", folder / f"seen-{i}"
                payload = {"started": str(started), "seen": str(seen)}
                job_id = queue.enqueue("watch-cancel", payload, queue=QUEUE).id
                wait_for(started)
                time.sleep(0.3)  # the handler is well into its wait
                assert queue.cancel(job_id)
                cancelled = time.time()
                wait_for(seen)
                latencies.append(float(seen.read_text()) - cancelled)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
            queue.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dsns", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for dsn in args.dsns:
        with tempfile.TemporaryDirectory() as folder:
            seconds = measure(dsn, args.rounds, Path(folder))
        backend = dsn.split(":", 1)[0].split("+", 1)[0]
        print(
            f"{backend:10} cancel -> lost: median {statistics.median(seconds) * 1000:6.0f} ms, "
            f"worst {max(seconds) * 1000:6.0f} ms over {len(seconds)} rounds"
        )


if __name__ == "__main__":
    main()
