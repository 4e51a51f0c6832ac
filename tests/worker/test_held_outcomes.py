"""A handler process holds a short handler's outcome while the next job it was sent
runs, to send several in one message (issue 29), and says so in the memory it shares
with its worker, so that a crash meanwhile charges only the job that ran (W7). A real
handler process, forked as the fork server forks one, and the worker's end of its
socket read as the slot reads it."""

from __future__ import annotations

import mmap
import os
import select
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from queuecore.job import Job, to_datetime
from queuecore.worker.processes.fork_server import serve_jobs
from queuecore.worker.processes.handler_child import Serving
from queuecore.worker.processes.messages import (
    Flush,
    Inbox,
    JobReturned,
    Jobs,
    Message,
    Ready,
    send,
)
from queuecore.worker.processes.shared import (
    RUNNING,
    SHARED_SIZE,
    returned_unsent,
    shared_word,
)


@dataclass
class HandlerProcess:
    pid: int
    conn: Connection
    inbox: Inbox
    shared: mmap.mmap

    def messages(self, count: int) -> list[Message]:
        """The next `count` messages, or fewer if none comes for ten seconds."""
        got: list[Message] = []
        while len(got) < count and select.select([self.inbox.fd], [], [], 10)[0]:
            got += self.inbox.read()
        return got


def _eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _job(job_id: int, kind: str, payload: dict[str, str]) -> Job:
    return Job(job_id, kind, payload, "default", 0, 1, 3, f"token-{job_id}", to_datetime(2e9))


def _no_queue() -> object:
    raise AssertionError("no handler here returns an effect")


@pytest.fixture
def child() -> Iterator[HandlerProcess]:
    """A handler process with a no-op kind, and a kind that says it started then waits
    for a gate file (both named in its payload)."""

    def wait_for_gate(job: Job) -> None:
        Path(job.payload["started"]).touch()
        while not Path(job.payload["gate"]).exists():
            time.sleep(0.01)

    handlers = {"quick": lambda job: None, "gated": wait_for_gate}
    ours, theirs = socket.socketpair()
    running = shared_word()
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            serve_jobs(
                Connection(theirs.detach()),
                running,
                lambda conn, shared: Serving(conn, handlers, _no_queue, 1 << 20, shared),  # type: ignore[arg-type]
            )
        finally:
            os._exit(0)
    theirs.close()
    shared = mmap.mmap(running, SHARED_SIZE)
    os.close(running)
    conn = Connection(ours.detach())
    process = HandlerProcess(pid, conn, Inbox(conn.fileno()), shared)
    try:
        assert process.messages(1) == [Ready()]
        yield process
    finally:
        conn.close()
        os.waitpid(pid, 0)
        shared.close()


def test_a_short_handler_s_outcome_waits_behind_the_next_job_noted_and_goes_when_asked(
    child: HandlerProcess, tmp_path: Path
) -> None:
    """Held only if the quick handler took under a millisecond, which a loaded machine
    may deny once: up to three tries, the held outcome met in one."""
    for attempt in range(3):
        started, gate = tmp_path / f"started-{attempt}", tmp_path / f"gate-{attempt}"
        quick, gated = 2 * attempt + 1, 2 * attempt + 2
        payload = {"started": str(started), "gate": str(gate)}
        send(
            child.conn,
            Jobs([(quick, _job(quick, "quick", {})), (gated, _job(gated, "gated", payload))]),
        )
        _eventually(started.exists, "the gated handler never started")
        assert RUNNING.unpack_from(child.shared) == (gated,)
        if returned_unsent(child.shared) == {quick}:  # held, and noted, while the next runs
            send(child.conn, Flush())
            [held] = child.messages(1)
            assert isinstance(held, JobReturned) and held.ticket == quick, held
            # Cleared just after the send (a death between the two: the worker has read it).
            _eventually(lambda: not returned_unsent(child.shared), "the note outlived the send")
            gate.touch()
            [last] = child.messages(1)
            assert isinstance(last, JobReturned) and last.ticket == gated, last
            return
        gate.touch()
        assert [m.ticket for m in child.messages(2)] == [quick, gated]  # type: ignore[union-attr]
    pytest.fail("a quick handler's outcome was never held behind the next job")


def test_nothing_is_held_while_the_handler_process_waits_for_jobs(child: HandlerProcess) -> None:
    """Its last job's outcome goes at once: no job behind it, nobody would ask for it."""
    send(child.conn, Jobs([(1, _job(1, "quick", {})), (2, _job(2, "quick", {}))]))
    outcomes = child.messages(2)
    assert [(type(m), m.ticket) for m in outcomes] == [(JobReturned, 1), (JobReturned, 2)]  # type: ignore[union-attr]
    _eventually(lambda: not returned_unsent(child.shared), "the note outlived the send")
