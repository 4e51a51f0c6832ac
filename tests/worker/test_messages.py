"""The messages between a worker and its handler processes arrive as they were sent (one
by one, or many in one read), and the lease a job is handled under says once that it was lost."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import select
import struct
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest

from queuecore.handling import Lease
from queuecore.job import ClaimedJob, Job, to_datetime
from queuecore.worker.processes.messages import (
    READ_AT_ONCE,
    Inbox,
    JobCancelled,
    JobCompleting,
    JobReturned,
    Jobs,
    pickled,
    send,
    send_together,
    unwire,
    unwire_all,
    wire,
)


def _travel(message: object) -> object:
    return unwire(pickle.loads(pickle.dumps(wire(message))))  # type: ignore[arg-type]


def test_jobs_arrive_equal_to_the_jobs_sent_their_times_to_the_microsecond():
    """Jobs travel as plain tuples, their times as epoch seconds: what the handler gets
    must still be the very job claimed, every field, every microsecond."""
    jobs = [
        Job(
            7,
            "mail",
            {"to": "a@example.com", "nested": [1, {"x": None}]},
            "emails",
            -3,
            2,
            5,
            "4f2a9c",
            to_datetime(1_800_000_000.999999),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            to_datetime(1_700_000_000.000001),
        ),
        Job(8, "noop", {}, "default", 0, 1, 1, "b7e1", to_datetime(1_800_000_000.5)),
    ]
    arrived = _travel(Jobs([(1, jobs[0]), (2, jobs[1])]))
    assert isinstance(arrived, Jobs)
    assert arrived.jobs == [(1, jobs[0]), (2, jobs[1])]
    assert arrived.jobs[0][1].lease_expires_at == jobs[0].lease_expires_at
    assert arrived.jobs[1][1].ready_at is None


def test_a_claimed_job_travels_as_its_stored_payload_and_is_decoded_where_read():
    """The worker's process never decodes a claimed job's payload: the handler process
    gets the stored text, and reading the payload there decodes it."""
    ends = to_datetime(1_800_000_000.5)
    sent = ClaimedJob.read(
        9, "mail", '{"to": "a@example.com"}', "q", 0, 1, 3, "t", ends, None, None
    )
    arrived = _travel(Jobs([(1, sent)]))
    assert isinstance(arrived, Jobs)
    (_, job) = arrived.jobs[0]
    assert isinstance(job, ClaimedJob) and job.stored_payload == '{"to": "a@example.com"}'
    assert sent._stored_payload is not None  # sending it did not decode it
    assert job.payload == {"to": "a@example.com"} and job == sent


def test_other_messages_travel_as_their_fields():
    assert _travel(JobReturned(3, {"ok": True}, 0.25)) == JobReturned(3, {"ok": True}, 0.25)


def test_a_lease_is_lost_once_and_every_handler_waits_on_the_same_event():
    """`lost` is made when first asked for (most leases never need one): whichever
    thread asks first, all get one Event, and marking it lost answers True once."""
    lease = Lease(Job(1, "noop", {}, "default", 0, 1, 3, "t", to_datetime(1_800_000_000.0)))
    assert lease.is_lost is False
    events: list[threading.Event] = []
    threads = [threading.Thread(target=lambda: events.append(lease.lost)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(event) for event in events}) == 1
    assert [lease.mark_lost(), lease.mark_lost()] == [True, False]
    assert lease.is_lost and events[0].is_set()


Pair = tuple[Connection, Inbox]


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A child's end that sends as a handler process does, and the worker's inbox on
    the other end."""
    worker_end, child_end = multiprocessing.Pipe()
    yield child_end, Inbox(worker_end.fileno())
    worker_end.close()
    child_end.close()


def _read_all(inbox: Inbox, until: int) -> list[object]:
    """What the inbox returns over as many reads as it takes for `until` messages (or
    until nothing more arrives for a while)."""
    messages: list[object] = []
    while len(messages) < until and select.select([inbox.fd], [], [], 10)[0]:
        messages += inbox.read()
    return messages


def test_the_inbox_takes_every_message_waiting_in_one_read(pair: Pair) -> None:
    """Outcomes sent one by one, read at once: a short handler's process sends several
    before the worker looks, and each must come out whole, in order."""
    child, inbox = pair
    sent = [JobReturned(n, {"n": n}, 0.001 * n) for n in range(1, 51)]
    for message in sent:
        send(child, message)
    assert inbox.read() == sent


def test_the_inbox_keeps_a_message_cut_between_reads_and_one_longer_than_a_read(pair: Pair) -> None:
    """A result longer than one read (READ_AT_ONCE) arrives over several reads, and the
    message after it is not lost; nor is one whose header alone has arrived."""
    child, inbox = pair
    long = JobReturned(1, "x" * (3 * READ_AT_ONCE), 0.5)
    sender = threading.Thread(target=lambda: [send(child, long), send(child, JobCompleting(2))])
    sender.start()
    assert _read_all(inbox, 2) == [long, JobCompleting(2)]
    sender.join()
    frame = pickled(JobCompleting(3))
    header, body = struct.pack("!i", len(frame)), frame
    os.write(child.fileno(), header[:2])
    assert inbox.read() == []
    os.write(child.fileno(), header[2:] + body[:3])
    assert inbox.read() == []
    os.write(child.fileno(), body[3:])
    assert inbox.read() == [JobCompleting(3)]


def test_the_inbox_returns_what_a_dead_child_sent_before_saying_it_closed(pair: Pair) -> None:
    """W7: once a handler process died, every outcome it sent is read before its death
    is: the jobs it finished are reported, not run again; a message it was cut off in
    the middle of is no message."""
    child, inbox = pair
    send(child, JobReturned(1, None, 0.1))
    send(child, JobReturned(2, None, 0.1))
    frame = pickled(JobReturned(3, None, 0.1))
    os.write(child.fileno(), struct.pack("!i", len(frame)) + frame[:5])
    child.close()
    assert inbox.read() == [JobReturned(1, None, 0.1), JobReturned(2, None, 0.1)]
    with pytest.raises(EOFError):
        inbox.read()


def test_the_event_loop_process_s_frames_come_out_as_the_lists_it_sent(pair: Pair) -> None:
    """The event-loop process sends several outcomes in one frame; the worker reads
    every frame waiting in one read and each comes out whole, in order."""
    child, inbox = pair
    passes = [[JobReturned(1, None, 0.1), JobCancelled(3, 0.2)], [JobCompleting(2)]]
    for messages in passes:
        send_together(child, messages)
    assert [unwire_all(frame) for frame in inbox.frames()] == passes
