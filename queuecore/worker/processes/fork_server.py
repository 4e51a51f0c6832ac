"""The fork server of handler processes (W7; the worker's side is
`queuecore.worker.processes.handler_processes`).

One fork server per worker (forked from `queuecore worker`'s process before it starts a
thread or connects, else started as a fresh interpreter: `handler_processes.prestart`)
imports the registry and forks a handler process for each slot on the worker's request
(and again after one died), or one loop process for a registry of `async def` handlers
(ADR 0011), so a worker with N slots starts at most two interpreters, not N + 1, and a
crashed handler process is replaced in milliseconds. The fork server runs
no thread and opens no database connection, so a fork inherits neither a held lock nor
a connection in use (SQLite forbids carrying one across a fork). It sends the worker
each child's socket and shared word, and reaps children.
"""

from __future__ import annotations

import logging
import mmap
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.reduction import send_handle
from typing import Any

from queuecore.core import tracing
from queuecore.core.dsn import secrets_of
from queuecore.handling import Handler
from queuecore.observe.worklog import configure_logging
from queuecore.worker.processes.handler_child import Serving
from queuecore.worker.processes.loop_child import LoopServing
from queuecore.worker.processes.messages import (
    Exited,
    Fork,
    Forked,
    Ready,
    WaitFor,
    receive,
    send,
)
from queuecore.worker.processes.shared import (
    SHARED_SIZE,
    remember_supervisor,
    shared_word,
    supervisor_pid,
)


def main(argv: list[str]) -> int:
    """The fork server: set up once, then fork handler processes when asked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    remember_supervisor(os.getppid())
    conn = Connection(int(argv[1]))
    try:
        config: dict[str, Any] = conn.recv()
        configure_logging(config["log_level"], secrets_of(config["dsn"]))
        logging.getLogger("alembic").setLevel(logging.WARNING)

        from queuecore.connect import connect
        from queuecore.registry import load_registry
        from queuecore.worker.async_handling import runs_on_event_loop

        handlers = load_registry(config["registry"])
        options = config["connect_options"]
        on_loop = runs_on_event_loop(handlers)
        send(conn, Ready())
        while True:
            request = receive(conn)
            if isinstance(request, Fork) and on_loop:  # one process runs them all (ADR 0011)
                fork_child(conn, lambda ours, word: serve_loop(ours, word, handlers, config))
            elif isinstance(request, Fork):

                def serving(ours: Connection, running: mmap.mmap) -> Serving:
                    return Serving(
                        ours,
                        handlers,
                        lambda: connect(config["dsn"], **options),
                        config["max_result_bytes"],
                        running,
                    )

                fork_child(conn, lambda ours, word: serve_jobs(ours, word, serving))
            elif isinstance(request, WaitFor):  # the worker saw its socket close
                _, status = os.waitpid(request.pid, 0)
                send(conn, Exited(os.waitstatus_to_exitcode(status)))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the worker is gone (killed, say): its handler processes see it themselves
    return 0


def fork_child(server: Connection, body: Callable[[Connection, int], None]) -> None:
    """Fork a handler process of either kind, which runs `body(its socket, its shared
    word)` and never returns; send the worker the child's socket and shared word. The
    fork server reaps the child when asked."""
    child_end, worker_end = socket.socketpair()
    running = shared_word()
    pid = os.fork()
    if pid == 0:  # the child: it never returns from here
        server.close()
        worker_end.close()
        try:
            body(Connection(child_end.detach()), running)
        finally:
            tracing.flush()
            os._exit(0)  # no finalizers: nothing inherited is closed or flushed twice
    child_end.close()
    send(server, Forked(pid))
    to = supervisor_pid() or os.getppid()
    send_handle(server, worker_end.fileno(), to)
    send_handle(server, running, to)
    worker_end.close()
    os.close(running)


def serve_jobs(conn: Connection, running: int, serving: Callable[..., Serving]) -> None:
    """A handler process's life: its reader thread takes the worker's messages, its main
    thread runs the jobs."""
    shared = mmap.mmap(running, SHARED_SIZE)
    os.close(running)
    child = serving(conn, shared)
    child.send(Ready())
    threading.Thread(target=child.read, name="queuecore-from-worker", daemon=True).start()
    child.serve()


def serve_loop(
    conn: Connection, running: int, handlers: Mapping[str, Handler], config: Any
) -> None:
    """The loop process's life (ADR 0011): one event loop runs every job it is sent."""
    shared = mmap.mmap(running, SHARED_SIZE)
    os.close(running)
    LoopServing(conn, shared, handlers, config).run()


#: What the fork server runs: `main` of this module, not this module as __main__ (whose
#: globals would be another copy than the ones the handlers import).
COMMAND = [
    sys.executable,
    "-c",
    "import sys; from queuecore.worker.processes.fork_server import main; sys.exit(main(sys.argv))",
]
