"""Handler processes (W7): each slot of a worker runs its handlers in a child process of
its own, so a handler that kills its process (`os._exit`, SIGKILL, SIGSEGV, the OOM
killer) takes only its own job with it. The worker, the supervising parent, keeps the
claims, leases, listener and ack window; the children only run handlers. They are forked
by the worker's fork server (`queuecore.handler_process`), which sends each one's socket.

A slot sends one job at a time and reads back what it came to. The child's socket
closing is its death, seen at once: the job whose handler was running is failed then
with an error naming the exit (the fork server reaps the child and says how it ended),
instead of after its lease. A job whose outcome the child had sent is reported as usual:
its handler had returned. An effect is a closure that cannot cross to the parent, so a
child completes such a job itself (R10), and says so first: dying before that
completion commits charges the job, as its effect is handler code too; a completion that
did commit is kept by the fence.

Messages (pickled tuples over socket pairs). To the fork server: the configuration, then
("fork",) answered by ("forked", pid) and the child's socket, ("wait", pid) answered by
("exited", code). A child says ("ready",) once it has its connection. To a child:
("job", Job), ("lost", id) when the worker's heartbeat lost the job's lease (W3);
closing its socket stops it. From a child, per job: ("returned", result) | ("raised", error,
retry_in, permanent) | ("completing",) then ("completed", done) or ("raised", ...).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle
from typing import Any

from queuecore.errors import QueuecoreError
from queuecore.handler_process import COMMAND
from queuecore.handling import Completed, Crashed, Lease, Outcome, Raised, Returned

WATCH_SLICE = 0.1  # how often a running job's lease is looked at, to tell it was lost


class HandlerProcessError(QueuecoreError):
    """A handler process could not start (its own output, above in the log, says why)."""


@dataclass(frozen=True)
class HandlerProcesses:
    """How a worker starts the processes its handlers run in: each imports `registry`
    (MODULE:NAME) itself, and connects with `dsn` and `connect_options` (plain values)
    for the completions whose effects it commits."""

    registry: str
    dsn: str
    connect_options: Mapping[str, Any] = field(default_factory=dict)
    log_level: str = "INFO"


class ForkServer:
    """The worker's side of its fork server (`queuecore.handler_process`), shared by its
    slots: started on first use, asked for a handler process, and for how one ended."""

    def __init__(self, config: HandlerProcesses, *, max_result_bytes: int) -> None:
        self.config = config
        self.max_result_bytes = max_result_bytes
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    def fork(self) -> tuple[int, Connection]:
        """A new handler process: its pid, and the socket to talk to it."""
        with self._lock:
            conn = self._conn or self._start()
            try:
                conn.send(("fork",))
                _, pid = conn.recv()
                return pid, Connection(recv_handle(conn))
            except (EOFError, OSError) as exc:
                raise self._failed("stopped") from exc

    def wait(self, pid: int) -> int:
        """How handler process `pid` ended, once its socket closed: its exit code, or minus
        the number of the signal that killed it."""
        with self._lock:
            if self._conn is None:
                raise HandlerProcessError("the fork server is not running")
            try:
                self._conn.send(("wait", pid))
                return int(self._conn.recv()[1])
            except (EOFError, OSError) as exc:
                raise self._failed("stopped") from exc

    def close(self) -> None:
        """Stop the fork server; handler processes stop when their sockets close."""
        with self._lock:
            proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
        if conn is not None:
            conn.close()
        if proc is not None:
            proc.wait()

    def _start(self) -> Connection:
        ours, theirs = socket.socketpair()
        with theirs:
            fd = theirs.fileno()
            self._proc = subprocess.Popen(
                [*COMMAND, str(fd)], pass_fds=[fd], stdin=subprocess.DEVNULL
            )
        conn = Connection(ours.detach())
        config = self.config
        try:
            conn.send(
                {
                    "registry": config.registry,
                    "dsn": config.dsn,
                    "connect_options": dict(config.connect_options),
                    "log_level": config.log_level,
                    "max_result_bytes": self.max_result_bytes,
                }
            )
            ready = conn.recv()
        except (EOFError, OSError):
            ready = None
        if ready != ("ready",):
            conn.close()
            raise self._failed("could not start")
        self._conn = conn
        return conn

    def _failed(self, what: str) -> HandlerProcessError:
        proc, self._proc, self._conn = self._proc, None, None
        code = "" if proc is None else f" ({exit_text(proc.wait())})"
        return HandlerProcessError(
            f"the fork server of the handler processes for {self.config.registry} {what}"
            f"{code}; its output above says why"
        )


class HandlerProcess:
    """One slot's handler process, forked again after it died."""

    def __init__(self, server: ForkServer) -> None:
        self.server = server
        self._pid: int | None = None
        self._conn: Connection | None = None

    @property
    def started(self) -> bool:
        return self._conn is not None

    def start(self) -> None:
        """Fork a handler process, and wait until it has its connection (or found the
        database out of reach), so no claimed job waits for that."""
        pid, conn = self.server.fork()
        try:
            ready = conn.recv()
        except (EOFError, OSError):
            ready = None
        if ready != ("ready",):
            conn.close()
            code = self.server.wait(pid)
            raise HandlerProcessError(f"a handler process (pid {pid}) {exit_text(code)} at start")
        self._pid, self._conn = pid, conn

    def run(self, lease: Lease) -> Outcome:
        assert self._pid is not None and self._conn is not None, "start() first"
        pid, conn = self._pid, self._conn
        doing = "the handler"
        told_lost = False
        try:
            conn.send(("job", lease.job))
            while True:
                if not conn.poll(WATCH_SLICE):
                    if lease.lost.is_set() and not told_lost:
                        conn.send(("lost", lease.job.id))
                        told_lost = True
                    continue
                message = conn.recv()
                if message[0] == "returned":
                    return Returned(result=message[1])
                if message[0] == "raised":
                    return Raised(*message[1:])
                if message[0] == "completed":
                    return Completed(message[1])
                lease.reporting = True  # "completing": a heartbeat finding it done is no loss
                doing = "the handler's effect (the completion did not commit)"
        except (EOFError, OSError):
            pass
        self._pid = self._conn = None
        conn.close()
        code = self.server.wait(pid)
        return Crashed(f"its handler process (pid {pid}) {exit_text(code)} while running {doing}")

    def close(self) -> None:
        """Stop the handler process: it exits when its socket closes."""
        pid, conn, self._pid, self._conn = self._pid, self._conn, None, None
        if conn is not None and pid is not None:
            conn.close()
            with contextlib.suppress(HandlerProcessError):
                self.server.wait(pid)


def exit_text(code: int) -> str:
    """How a process ended, for a person: the signal's name, or the exit code."""
    if code < 0:
        try:
            sig = signal.Signals(-code)
        except ValueError:
            return f"was killed by signal {-code}"
        return f"was killed by {sig.name} ({signal.strsignal(sig) or sig.name})"
    return f"exited with code {code}"
