"""The child side of handler processes (W7; `queuecore.supervisor` is the worker's side).

One fork server per worker, started as a fresh interpreter, imports the registry and
forks a handler process for each slot on the worker's request (and again after one died),
so a worker with N slots starts two interpreters, not N + 1, and a crashed handler process
is replaced in milliseconds. The fork server runs no thread and opens no database
connection, so a fork inherits neither a held lock nor a connection in use (SQLite forbids
carrying one across a fork). It sends the worker each child's socket, and reaps children.

A handler process runs the jobs its worker sends, one at a time, and sends back what each
came to. Its main thread runs handlers; a reader thread takes the worker's messages, so a lost
lease reaches `current_lease().lost` while the handler runs (W3), and the end of the
worker (its socket closing, even by SIGKILL) ends this process at once. SIGTERM and
SIGINT are the worker's to handle (W4): a terminal's Ctrl-C reaches the whole process
group, and the running handler must be let finish within the grace period.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue as stdlib_queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle
from typing import Any, TypeVar

from queuecore import tracing
from queuecore.handling import Handler, Lease, Raised, Returned
from queuecore.job import Job
from queuecore.protocol import Effect, Queue
from queuecore.reconnect import connection_lost
from queuecore.slots import run_in_this_process
from queuecore.worklog import LOG_FORMAT

T = TypeVar("T")
log = logging.getLogger("queuecore.worker")
_supervisor: int | None = None


def supervisor_pid() -> int | None:
    """The worker process this handler process runs for; None outside a handler process.
    For a handler that must act on its whole worker (e.g. freeze it in a test)."""
    return _supervisor


class Serving:
    def __init__(
        self,
        conn: Connection,
        handlers: Mapping[str, Handler],
        open_queue: Callable[[], Queue],
        max_result_bytes: int,
    ) -> None:
        self.conn = conn
        self.handlers = handlers
        self.max_result_bytes = max_result_bytes
        self.open_queue = open_queue
        self.queue: Queue | None = None
        self.waiting_for_database = False
        self.jobs: stdlib_queue.SimpleQueue[Job] = stdlib_queue.SimpleQueue()
        self.current: Lease | None = None

    def read(self) -> None:
        """The worker's messages, until it goes away; then this process goes too."""
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                tracing.flush()
                os._exit(0)
            if message[0] == "job":
                self.jobs.put(message[1])
            elif message[0] == "lost":
                lease = self.current
                if lease is not None and lease.job.id == message[1]:
                    lease.lost.set()

    def serve(self) -> None:
        while True:
            job = self.jobs.get()
            lease = self.current = Lease(job)
            outcome = run_in_this_process(self.handlers, lease, self.max_result_bytes)
            if isinstance(outcome, Raised):
                self.send_raised(outcome)
            elif outcome.effect is None:  # the result (a JSON value) travels back
                self.conn.send(("returned", outcome.result))
            else:
                self.complete(job, outcome)
            self.current = None

    def connect(self) -> Queue:
        """This process's own connection, for the completions with effects; opened at
        start when the database can be reached, else when first needed, then retried
        until it can (an outage is never the job's failure)."""
        while self.queue is None:
            try:
                self.queue = self.open_queue()
            except Exception as exc:
                if not self.waiting_for_database:
                    log.warning("cannot connect yet (%s); trying again", exc)
                    self.waiting_for_database = True
                time.sleep(1.0)
        self.waiting_for_database = False
        return self.queue

    def complete(self, job: Job, outcome: Returned) -> None:
        """Commit the effect with the completion here: a closure cannot be sent (R10)."""
        self.conn.send(("completing",))
        effect: Effect = outcome.effect  # type: ignore[assignment]
        try:
            queue = self.connect()
            done = until_reachable(
                lambda: queue.complete(job, effect=effect, result=outcome.result)
            )
        except Exception as exc:  # the effect raised (rolled back), or the database did
            self.send_raised(Raised.from_exception(exc))
        else:
            self.conn.send(("completed", done))

    def send_raised(self, raised: Raised) -> None:
        self.conn.send(("raised", raised.error, raised.retry_in, raised.permanent))


def until_reachable(report: Callable[[], T]) -> T:
    """As the worker's reporter: an outage is never the job's failure. The worker ends
    this process if it gives up (a second stop signal)."""
    pause = 0.05
    while True:
        try:
            return report()
        except Exception as exc:
            if not connection_lost(exc):
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def main(argv: list[str]) -> int:
    """The fork server: set up once, then fork handler processes when asked."""
    global _supervisor
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _supervisor = os.getppid()
    conn = Connection(int(argv[1]))
    try:
        config: dict[str, Any] = conn.recv()
        logging.basicConfig(level=config["log_level"], format=LOG_FORMAT)
        logging.getLogger("alembic").setLevel(logging.WARNING)

        from queuecore.connect import connect
        from queuecore.registry import load_registry

        handlers = load_registry(config["registry"])
        options = config["connect_options"]
        conn.send(("ready",))
        while True:
            request = conn.recv()
            if request[0] == "fork":
                fork_handler_process(
                    conn,
                    lambda ours: Serving(
                        ours,
                        handlers,
                        lambda: connect(config["dsn"], **options),
                        config["max_result_bytes"],
                    ),
                )
            else:  # ("wait", pid): the worker saw its socket close
                _, status = os.waitpid(request[1], 0)
                conn.send(("exited", os.waitstatus_to_exitcode(status)))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the worker is gone (killed, say): its handler processes see it themselves
    return 0


def fork_handler_process(server: Connection, serving: Callable[[Connection], Serving]) -> None:
    child_end, worker_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the handler process: it never returns from here
        server.close()
        worker_end.close()
        try:
            child = serving(Connection(child_end.detach()))
            with contextlib.suppress(Exception):  # unreachable now: connect() tries again
                child.queue = child.open_queue()  # before "ready": no lease waits for it
            child.conn.send(("ready",))
            threading.Thread(target=child.read, name="queuecore-from-worker", daemon=True).start()
            child.serve()
        finally:
            tracing.flush()
            os._exit(0)  # no finalizers: nothing inherited is closed or flushed twice
    child_end.close()
    server.send(("forked", pid))
    send_handle(server, worker_end.fileno(), _supervisor or os.getppid())
    worker_end.close()


#: What the fork server runs: `main` of this module, not this module as __main__, whose
#: globals (`supervisor_pid`) would be another copy than the one the handlers import.
COMMAND = [
    sys.executable,
    "-c",
    "import sys; from queuecore.handler_process import main; sys.exit(main(sys.argv))",
]
