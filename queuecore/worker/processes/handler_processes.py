"""Handler processes (W7): each slot of a worker runs its handlers in a child process of
its own, so a handler that kills its process (`os._exit`, SIGKILL, SIGSEGV, the OOM
killer) takes only its own job with it. The worker, the supervising parent, keeps the
claims, leases, listener and ack window; the children only run handlers. They are forked
by the worker's fork server (`queuecore.worker.processes.fork_server`), which sends each
one's socket.

A slot (`queuecore.worker.processes.handler_slot`) keeps its handler process a few jobs
ahead and reads back what each came to, in order. The child's socket closing is its death,
seen at once: the job whose handler was running (the number the child wrote into the word it shares
with the worker before starting it) is failed then with an error naming the exit (the
fork server reaps the child and says how it ended), instead of after its lease; the jobs
sent after it never started and are given back, their attempts uncounted (R14). A job
whose outcome the child had sent is reported as usual: its handler had returned. An
effect is a closure that cannot cross to the parent, so a child completes such a job
itself (R10), and says so first: dying before that completion commits charges the job,
as its effect is handler code too; a completion that did commit is kept by the fence.

The fork server is sent its configuration, then the messages of
`queuecore.worker.processes.messages`, which also says what a worker and each kind of
child tell each other. A handler process connects to the database only for its first
effect.
"""

from __future__ import annotations

import mmap
import os
import signal
import socket
import subprocess
import threading
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle
from typing import Any

from queuecore.errors import QueuecoreError
from queuecore.worker.processes.fork_server import COMMAND
from queuecore.worker.processes.fork_server import main as fork_server_main
from queuecore.worker.processes.messages import Exited, Fork, Forked, Ready, WaitFor, receive, send
from queuecore.worker.processes.shared import SHARED_SIZE


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


class Started:
    """A fork server's process: a fresh interpreter, or a fork of the worker's."""

    def __init__(self, pid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = pid
        self.popen = popen
        self._code: int | None = None

    def wait(self) -> int:
        """Its exit code, or minus the signal that ended it (once it ended)."""
        if self.popen is not None:
            return self.popen.wait()
        if self._code is None:
            _, status = os.waitpid(self.pid, 0)
            self._code = os.waitstatus_to_exitcode(status)
        return self._code


_spare: tuple[Started, Connection] | None = None
_spare_lock = threading.Lock()


def prestart(*, fork: bool = True) -> None:
    """Start a fork server now, for the worker about to be made, so that its start
    overlaps the worker's own (loading the registry, connecting) instead of delaying
    the worker's first job. The next ForkServer to start takes it; a process that never
    uses it ends it by exiting (its socket closes).

    Called while its process runs no other thread (the command line, before anything
    else), it forks that process: a fork server in a millisecond, its imports done,
    and, as with a fresh interpreter, no thread, lock or connection in it. Otherwise
    it starts a fresh interpreter, since a fork of a threaded process could inherit a
    lock held by a thread that does not exist in the fork. `fork=False` asks for a fresh
    interpreter anyway: a fork shows its parent's command line in the process list, and
    so do the handler processes forked from it, which must not repeat a password given
    there."""
    global _spare
    with _spare_lock:
        if _spare is None:
            _spare = _launch(fork=fork and threading.active_count() == 1)


def _launch(*, fork: bool = False) -> tuple[Started, Connection]:
    ours, theirs = socket.socketpair()
    if fork:
        pid = os.fork()
        if pid == 0:  # the fork server: it never returns from here
            code = 1
            try:
                ours.close()
                code = fork_server_main(["fork server", str(theirs.detach())])
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)  # no finalizers: what the worker holds is the worker's
        theirs.close()
        return Started(pid), Connection(ours.detach())
    with theirs:
        fd = theirs.fileno()
        popen = subprocess.Popen([*COMMAND, str(fd)], pass_fds=[fd], stdin=subprocess.DEVNULL)
    return Started(popen.pid, popen), Connection(ours.detach())


class ForkServer:
    """The worker's side of its fork server (`queuecore.worker.processes.fork_server`),
    shared by its slots: started on first use, asked for a handler process, and for how
    one ended."""

    def __init__(self, config: HandlerProcesses, *, max_result_bytes: int) -> None:
        self.config = config
        self.max_result_bytes = max_result_bytes
        self._lock = threading.Lock()
        self._proc: Started | None = None
        self._conn: Connection | None = None

    def fork(self) -> tuple[int, Connection, mmap.mmap]:
        """A new handler process: its pid, the socket to talk to it, and the word where
        it writes the number of the job it starts (`handler_process.RUNNING`)."""
        with self._lock:
            conn = self._conn or self._start()
            try:
                send(conn, Fork())
                forked = receive(conn)
                assert isinstance(forked, Forked), forked
                pid = forked.pid
                sock = Connection(recv_handle(conn))
                fd = recv_handle(conn)
            except (EOFError, OSError) as exc:
                raise self._failed("stopped") from exc
        try:
            return pid, sock, mmap.mmap(fd, SHARED_SIZE)
        finally:
            os.close(fd)

    def fork_running(self) -> tuple[int, Connection, mmap.mmap]:
        """`fork()`, then wait until the process says it runs, so no claimed job waits
        for its start; one that dies first is a `HandlerProcessError` naming its exit."""
        pid, conn, running = self.fork()
        try:
            ready = isinstance(receive(conn), Ready)
        except (EOFError, OSError):
            ready = False
        if not ready:
            conn.close()
            running.close()
            code = self.wait(pid)
            raise HandlerProcessError(f"a handler process (pid {pid}) {exit_text(code)} at start")
        return pid, conn, running

    def wait(self, pid: int) -> int:
        """How handler process `pid` ended, once its socket closed: its exit code, or minus
        the number of the signal that killed it."""
        with self._lock:
            if self._conn is None:
                raise HandlerProcessError("the fork server is not running")
            try:
                send(self._conn, WaitFor(pid))
                exited = receive(self._conn)
                assert isinstance(exited, Exited), exited
                return exited.code
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
        global _spare
        with _spare_lock:
            spare, _spare = _spare, None
        self._proc, conn = spare or _launch()
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
            ready = isinstance(receive(conn), Ready)
        except (EOFError, OSError):
            ready = False
        if not ready:
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


def exit_text(code: int) -> str:
    """How a process ended, for a person: the signal's name, or the exit code."""
    if code < 0:
        try:
            sig = signal.Signals(-code)
        except ValueError:
            return f"was killed by signal {-code}"
        return f"was killed by {sig.name} ({signal.strsignal(sig) or sig.name})"
    return f"exited with code {code}"
