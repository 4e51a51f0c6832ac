"""The messages between a worker and its handler processes arrive as they were sent, and
the lease a job is handled under says once that it was lost."""

from __future__ import annotations

import pickle
import threading

from queuecore.handling import Lease
from queuecore.job import Job, to_datetime
from queuecore.worker.processes.messages import JobReturned, Jobs, unwire, wire


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
