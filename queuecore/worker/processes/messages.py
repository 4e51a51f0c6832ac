"""The messages between a worker and its handler processes: one named type each, the
same for both kinds of child, pickled over the child's socket (W7; ADR 0008, 0011).

With the fork server: the worker sends `Fork()`, answered by `Forked(pid)` then the
child's socket and shared word; `WaitFor(pid)`, answered by `Exited(code)`. A fork
server, and each child once it runs, says `Ready()`.

To a child: `Jobs([(ticket, Job), ...])`; `Lost(ticket)` once the worker's heartbeat
found the job's lease lost (W3); `Stop()`, answered by `JobsUnstarted(tickets)`, the jobs it
had not begun (W4); to a handler process `Flush()`, for the outcomes it holds; to the
event-loop process also `Slots(n)` once, and `Cancel(ticket)` for a task past its time
limit or cancel grace (W8, W9). Closing its socket ends it.

From a child, per job: `JobReturned(ticket, result, seconds)` or `JobRaised(ticket,
error, retry_in, permanent, seconds)`, or `JobCompleting(ticket)` then `JobCompleted(ticket,
done, seconds)` (or `JobRaised`) for a handler whose effect it commits itself; from the
loop process also `JobCancelled(ticket, seconds)` once a task it was asked to cancel
ended. `seconds` is how long the handler (and its effect) ran. A handler process runs
its jobs one at a time, in the order sent, so its outcomes come back in that order,
those of short handlers several to a message; the loop process's come back as its tasks
end, several to a message. Which jobs a child began is not a message: it writes that
into the memory it shares with the worker.

Each is a named tuple, built and read by name; on the socket it travels as a plain tuple
of its kind's number and its fields (`wire`, `unwire`): pickling a named tuple costs
about 4 µs a message against 0.5 µs for a plain one, and the hot path sends one per job
each way. A `Job` in `Jobs` travels as a tuple of its fields too.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from typing import Any, NamedTuple, Protocol

from queuecore.handling import Completed, Outcome, Raised, Returned
from queuecore.job import ClaimedJob, Job, to_datetime


class Ready(NamedTuple):
    """A fork server or a child runs, and takes requests."""


class Fork(NamedTuple):
    """To the fork server: start a child for a slot."""


class Forked(NamedTuple):
    pid: int


class WaitFor(NamedTuple):
    """To the fork server: the worker saw this child's socket close; reap it."""

    pid: int


class Exited(NamedTuple):
    code: int


class Jobs(NamedTuple):
    jobs: list[tuple[int, Job]]


class Lost(NamedTuple):
    ticket: int


class Stop(NamedTuple):
    """Give back, at once, every job not begun (W4, or jobs held behind a long one)."""


class Flush(NamedTuple):
    """To a handler process: send the outcomes it holds now (a long handler runs behind
    short ones whose outcomes it held to send together)."""


class Slots(NamedTuple):
    """To the loop process, once: how many of its tasks may run at a time."""

    tasks: int


class Cancel(NamedTuple):
    ticket: int


class JobsUnstarted(NamedTuple):
    tickets: list[int]


class JobReturned(NamedTuple):
    ticket: int
    result: Any
    seconds: float


class JobRaised(NamedTuple):
    ticket: int
    error: str
    retry_in: float | None
    permanent: bool
    seconds: float


class JobCompleting(NamedTuple):
    ticket: int


class JobCompleted(NamedTuple):
    ticket: int
    done: bool
    seconds: float


class JobCancelled(NamedTuple):
    ticket: int
    seconds: float


#: What a child may say of a job it was sent.
JobMessage = JobReturned | JobRaised | JobCompleting | JobCompleted | JobCancelled
#: Every message, to or from a child or the fork server.
Message = (
    Ready
    | Fork
    | Forked
    | WaitFor
    | Exited
    | Jobs
    | Lost
    | Stop
    | Slots
    | Cancel
    | JobsUnstarted
    | JobMessage
    | Flush
)

_KINDS: tuple[Any, ...] = (
    Ready,
    Fork,
    Forked,
    WaitFor,
    Exited,
    Jobs,
    Lost,
    Stop,
    Slots,
    Cancel,
    JobsUnstarted,
    JobReturned,
    JobRaised,
    JobCompleting,
    JobCompleted,
    JobCancelled,
    Flush,
)
_NUMBER = {kind: number for number, kind in enumerate(_KINDS)}
PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


class Socket(Protocol):
    """One end of a child's (or the fork server's) socket: a multiprocessing Connection."""

    def send_bytes(self, buf: bytes) -> None: ...

    def recv_bytes(self) -> bytes: ...


def wire(message: Message) -> tuple[Any, ...]:
    """The message as it travels: its kind's number, then its fields."""
    if type(message) is Jobs:
        return (_JOBS, [(ticket, _job_fields(job)) for ticket, job in message.jobs])
    return (_NUMBER[type(message)], *message)


def unwire(sent: tuple[Any, ...]) -> Message:
    """The message `wire` made."""
    if sent[0] == _JOBS:
        return Jobs([(ticket, _job(fields)) for ticket, fields in sent[1]])
    kind: Any = _KINDS[sent[0]]
    message: Message = kind._make(sent[1:])
    return message


_JOBS = _NUMBER[Jobs]


def _job_fields(job: Job) -> tuple[Any, ...]:
    """A job as it travels: its fields in a plain tuple, its times as epoch seconds, its
    payload as JSON text (as a claim read it: the handler process decodes it).
    Pickling the `Job` itself (a slotted dataclass, and two aware datetimes) cost
    27.3 µs a message of 8 jobs against 7.6 µs for this, on the worker's slot thread."""
    ready_at = job.ready_at
    return (
        job.id,
        job.kind,
        job.stored_payload if isinstance(job, ClaimedJob) else json.dumps(job.payload),
        job.queue,
        job.priority,
        job.attempts,
        job.max_attempts,
        job.lease_token,
        job.lease_expires_at.timestamp(),
        job.trace_context,
        None if ready_at is None else ready_at.timestamp(),
    )


def _job(fields: tuple[Any, ...]) -> Job:
    """The job `_job_fields` sent."""
    (id_, kind, payload, queue, priority, attempts, most, token, expires, trace, ready) = fields
    return ClaimedJob.read(
        id_,
        kind,
        payload,
        queue,
        priority,
        attempts,
        most,
        token,
        to_datetime(expires),
        trace,
        to_datetime(ready),
    )


def pickled(message: Message) -> bytes:
    """The message as its bytes on the socket: plain `pickle`, not the `Connection`'s own
    `send`, which makes a `ForkingPickler` (able to send sockets and locks, which no
    message holds) for every message: a seventh of the slot thread's time (py-spy)."""
    return pickle.dumps(wire(message), PICKLE_PROTOCOL)


def send(conn: Socket, message: Message) -> None:
    conn.send_bytes(pickled(message))


def send_together(conn: Socket, messages: list[Message]) -> None:
    """Several messages in one frame (the event-loop process's outcomes of one pass),
    plain `pickle` as `pickled`; the worker's side reads them with `unwire_all`."""
    conn.send_bytes(pickle.dumps([wire(message) for message in messages], PICKLE_PROTOCOL))


def unwire_all(frame: Any) -> list[Message]:
    """The messages of one `send_together` frame, as loaded."""
    return [unwire(message) for message in frame]


def receive(conn: Socket) -> Message:
    return unwire(pickle.loads(conn.recv_bytes()))


_SIZE = struct.Struct("!i")  # a `Connection` message's header: its length in bytes
_LONG_SIZE = struct.Struct("!Q")  # after a size of -1: the length of one over 2 GiB
READ_AT_ONCE = 1 << 16


class Inbox:
    """The messages a child sent over its socket, every one waiting taken in one read.

    A handler process sends each job's outcome the moment its handler returns, before
    it starts the next (W7: once it died, every outcome it had is on the socket), so
    short handlers leave several outcomes waiting by the time the worker looks. Read one
    by one (`Connection.recv`), each cost a wake-up and two reads; here a single read
    takes them all, framed as `Connection.send_bytes` frames them. Only for the socket's
    reading end once the child runs: nothing else may read it meanwhile."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()
        self._wanted = READ_AT_ONCE  # more when a long message is part read

    def read(self) -> list[Message]:
        """The whole messages waiting (poll first: some bytes must be); EOFError once the
        child's end closed and every whole message it sent was returned."""
        messages: list[Message] = []
        for frame in self.frames():
            if isinstance(frame, list):  # several outcomes sent together
                messages += unwire_all(frame)
            else:
                messages.append(unwire(frame))
        return messages

    def frames(self) -> list[Any]:
        """`read`, each frame as loaded: a wired message, or a list of them from
        `send_together`."""
        data = os.read(self.fd, self._wanted)
        if not data:
            raise EOFError("the child's socket closed")
        buffer = self._buffer
        buffer += data
        frames: list[Any] = []
        at, end = 0, len(buffer)
        self._wanted = READ_AT_ONCE
        while end - at >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buffer, at)
            start = at + _SIZE.size
            if size == -1:
                if end - start < _LONG_SIZE.size:
                    break
                (size,) = _LONG_SIZE.unpack_from(buffer, start)
                start += _LONG_SIZE.size
            if end - start < size:
                self._wanted = max(READ_AT_ONCE, start + size - end)
                break
            frames.append(pickle.loads(buffer[start : start + size]))
            at = start + size
        del buffer[:at]
        return frames


def job_raised(ticket: int, outcome: Raised, seconds: float) -> JobRaised:
    """What a child says of a job whose handler (or its effect) raised, after `seconds`."""
    return JobRaised(ticket, outcome.error, outcome.retry_in, outcome.permanent, seconds)


def job_ended(message: Message) -> tuple[int, Outcome, float]:
    """The ticket, the outcome for the reporter, and the seconds the handler ran, of a
    `JobReturned`, `JobRaised` or `JobCompleted`; any other message here is a bug."""
    if isinstance(message, JobReturned):
        return message.ticket, Returned(result=message.result), message.seconds
    if isinstance(message, JobRaised):
        raised = Raised(message.error, message.retry_in, message.permanent)
        return message.ticket, raised, message.seconds
    if isinstance(message, JobCompleted):
        return message.ticket, Completed(message.done), message.seconds
    raise AssertionError(f"a handler process sent {message!r} for a job")
