"""Whole workers on PostgreSQL across a link with 5 ms of delay each way, with the
completion window at its default and at 1 (one commit per completion), in one run:

    python -m benchmarks.delayed_link [--jobs 1000] [--delay-ms 5] [--repeats 3]

What a worker on another host than its database pays per round trip, and what the ack
window (`--ack-batch`, `--ack-ms`) buys back there. The kernel's `tc netem` would delay
the packets of a network namespace; this machine's kernel has no netem, so the delay is
a TCP relay in this process instead: every chunk read from either side is written to the
other `--delay-ms` later, in order. It adds a little CPU of its own, the same for both
rows, and the rows without delay (through the same relay at 0 ms) show how much.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path

import sqlalchemy as sa

import queuecore
from benchmarks.implementations import Target
from benchmarks.mariadb_worker import SERVERS, scratch
from benchmarks.worker_e2e import WORKER, Run, keep, measure

#: The rows: a name and the worker options that make it.
WINDOWS = {"ack window default": (), "ack window 1": ("--ack-batch", "1")}


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copies `reader` to `writer`, each chunk `delay` seconds after it arrived."""
    pending: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await pending.get()
            if not chunk:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(chunk)
            await writer.drain()
        writer.close()

    delivering = asyncio.create_task(deliver())
    try:
        while chunk := await reader.read(65536):
            pending.put_nowait((time.monotonic() + delay, chunk))
    finally:
        pending.put_nowait((0.0, b""))
        await delivering


class DelayedLink:
    """A TCP relay on 127.0.0.1 in front of host:port, delaying both directions."""

    def __init__(self, host: str, port: int, delay: float) -> None:
        self.target = (host, port)
        self.delay = delay
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            _pump(client_r, server_w, self.delay),
            _pump(server_r, client_w, self.delay),
            return_exceptions=True,
        )

    def __enter__(self) -> DelayedLink:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def through(link: DelayedLink, dsn: str) -> str:
    """`dsn` with its host and port replaced by the link's."""
    url = sa.make_url(dsn).set(host="127.0.0.1", port=link.port)
    return url.render_as_string(hide_password=False)


def drain(link: DelayedLink, options: tuple[str, ...], jobs: int, folder: Path) -> Run:
    with scratch(SERVERS["postgresql"]) as dsn:
        with queuecore.connect(dsn) as queue:
            queue.enqueue_many("noop", [{}] * jobs)
        linked = through(link, dsn)
        return measure(WORKER, Target("postgresql", linked), 1, jobs, folder, options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.delayed_link")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    server = sa.make_url(SERVERS["postgresql"])
    host, port = server.host or "127.0.0.1", server.port or 5432
    rates: dict[tuple[float, str], list[float]] = {}
    delays = (0.0, args.delay_ms)
    with tempfile.TemporaryDirectory(prefix="qc-bench-") as folder:
        for repeat in range(args.repeats):  # interleaved: a disturbance hits every row
            for delay_ms in delays:
                with DelayedLink(host, port, delay_ms / 1000) as link:
                    for name, options in WINDOWS.items():
                        run = drain(link, options, args.jobs, Path(folder))
                        label = f"{delay_ms:g} ms {name}"
                        keep(rates, (delay_ms, name), run, label, repeat, args.repeats)
    print(f"\none worker, {args.jobs} no-op jobs, medians of {args.repeats} (jobs/s):")
    print(f"{'delay each way':>15} " + " ".join(f"{name:>19}" for name in WINDOWS))
    for delay_ms in delays:
        row = [statistics.median(rates[(delay_ms, name)]) for name in WINDOWS]
        print(f"{delay_ms:>12g} ms " + " ".join(f"{rate:>19,.0f}" for rate in row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
