"""Every job a worker holds, shared by its roles: the claimer adds jobs, slots take the
waiting ones, the reporter lets them go, the lease keeper renews them all.

A job is held from its claim until it was reported (or left to its lease); while its
completion waits in the ack window it still counts as held, not as active. Leases, not
job ids, are held: a job whose lease ran out can be claimed again by this very worker
while its first run is still being reported.

The sync worker's `Holdings` (shared by threads, under a lock) and the async worker's
`AsyncHoldings` (one event loop: no lock) stand side by side, over the same policies:
which jobs a check reads (`due_for_check`), the ack window's room (`room_for_claims`),
the handlers' mean time (`HandlerTimes`), and the pause after a failed check.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from queuecore.executors.reconnect import connection_lost
from queuecore.handling import Lease
from queuecore.job import Job
from queuecore.observe.worklog import label, log
from queuecore.worker.async_handling import AsyncLease, wait_for

if TYPE_CHECKING:
    from queuecore.protocol import AsyncQueue

#: Asks the queue which of these jobs their claims still hold (`Queue.held`).
Check = Callable[[list[Job]], list[bool]]


#: W9: how long after its claim (or its last check) a job is handed to a slot without
#: reading its fence again: the claim read it. The window a cancel can slip through is
#: this, as for the jobs already sent to a handler process (AHEAD_SECONDS of work); such
#: a handler hears the cancel as a running one does (`lost`). Measured on no-op jobs, a
#: read per hand-over cost 8% of the worker's throughput on SQLite and over 30% on
#: PostgreSQL (the slots wait for it), and with this window almost no read is needed
#: on a quiet machine: jobs claimed ahead of busy slots are handed over within
#: milliseconds. On a loaded one they wait longer, so a check reads every job then
#: waiting past the window, not only the ones taken (`_due`): the next hand-overs find
#: theirs fresh. On PostgreSQL the cancel's NOTIFY also marks a job claimed ahead, so it
#: is dropped unread.
FRESH_SECONDS = 0.02
#: A check before hand-over that could not be made (the database out of reach) is tried
#: again after CHECK_PAUSE, doubling to a second (`next_check_pause`), by either worker.
CHECK_PAUSE = 0.05


AnyLease = TypeVar("AnyLease", Lease, AsyncLease)


class _Asked:
    """One slot's check of the jobs it takes, answered on the claimer's thread."""

    __slots__ = ("answer", "done", "error", "jobs")

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = jobs
        self.answer: list[bool] = []
        self.error: Exception | None = None
        self.done = threading.Event()


class Holdings:
    def __init__(self, *, checked: bool = False) -> None:
        """`checked`: the jobs a slot takes are checked before it runs them (W9), so a
        job cancelled while it waited here never starts. The claimer answers the checks
        (`answer_checks`) on its own connection, every slot waiting at that moment in
        one read: a worker's connections do not grow with its slots."""
        self.checked = checked
        self._asked: list[_Asked] = []
        self._checks_closed = False
        self._lock = threading.Lock()
        self._leases: set[Lease] = set()  # every job held: waiting, running or acking
        self._waiting: deque[Lease] = deque()  # claimed, not yet started
        self._acking = 0  # how many of the held jobs wait in the ack window
        self._starting = 0  # slots whose handler process is starting: no job for them yet
        self._late: list[Lease] = []  # taken while a stop came: the worker releases them
        self._work = threading.Condition(self._lock)  # a job is waiting, or stopping
        self._times = HandlerTimes()
        #: The claimer should look again: room for its next claim, a notification, or a stop.
        self.wake = threading.Event()
        self.stopping = threading.Event()
        #: What the claimer waits for (`wake_for_room`): a job let go wakes it only when
        #: that makes room for its next claim, not once per job (each wake cost the
        #: claimer's thread a look at every lease while the slots needed the GIL).
        self._room_wanted: tuple[int, int, int] | None = None
        self._ring: Callable[[], None] | None = None  # see `ring_when_waiting`

    def hand_out(self, jobs: list[Job]) -> None:
        with self._lock:
            for job in jobs:
                lease = Lease(job)
                self._leases.add(lease)
                self._waiting.append(lease)
            self._work.notify(len(jobs))
            self._rung()

    def next_waiting(self) -> Lease | None:
        """The next claimed job for a free slot; None once stopping."""
        taken = self.take(1)
        return taken[0] if taken else None

    def take(self, most: int, *, wait: bool = True) -> list[Lease] | None:
        """Up to `most` claimed jobs for a slot to start now (waiting for one with
        `wait`), checked first in one read to be still held (W9): a job cancelled, or
        taken by another claim, while it waited here is let go, never started. None once
        stopping. A check that fails (the database out of reach) puts them back and
        tries again: the slot could not report anyway."""
        pause = CHECK_PAUSE
        while True:
            with self._lock:
                while wait and not self._waiting and not self.stopping.is_set():
                    self._work.wait()
                if self.stopping.is_set():
                    return None
                taken = [self._waiting.popleft() for _ in range(min(most, len(self._waiting)))]
                emptied = bool(taken) and not self._waiting and self._room_made()
            if emptied:  # the claimer waits for less room now
                self._wake()
            if not taken:
                return []
            kept = self._still_held(taken)
            if kept is None:
                if not wait:
                    return []
                self.stopping.wait(pause)
                pause = next_check_pause(pause)
                continue
            now = time.monotonic()
            for lease in kept:
                lease.handed = now
            if kept or not wait:
                return kept

    def _still_held(self, taken: list[Lease]) -> list[Lease] | None:
        """The taken jobs still held; the others let go. None: not known (put back)."""
        lost = [lease for lease in taken if lease.is_lost]
        live = [lease for lease in taken if not lease.is_lost]
        # A claim reads the fence too: a job claimed (or checked) within FRESH_SECONDS
        # goes on without another read.
        now = time.monotonic()
        fresh = [lease for lease in live if lease.checked >= now - FRESH_SECONDS]
        asked = [lease for lease in live if lease.checked < now - FRESH_SECONDS]
        if self.checked and asked:
            also = self._due(now - FRESH_SECONDS)
            try:
                answers = self._ask([lease.job for lease in asked + also])
            except Exception as exc:
                if not connection_lost(exc):  # an outage is the queue's to log, once
                    log.warning("cannot check the jobs claimed ahead (%s); trying again", exc)
                self._put_back(taken)
                return None
            kept: list[Lease] = []
            for lease, held in zip(asked, answers[: len(asked)], strict=True):
                (kept if held else lost).append(lease)
            for lease, held in zip(also, answers[len(asked) :], strict=True):
                if not held:
                    lease.mark_lost()  # let go, unstarted, when a slot takes it
            for lease in kept + also:
                lease.checked = now  # read after `now`: as fresh as a claim then
            asked = kept
        for lease in lost:
            log.info(
                "%s was cancelled (or its lease ended) while claimed ahead: not started",
                label(lease),
            )
            lease.mark_lost()
            self.let_go(lease)
        return fresh + asked

    def _due(self, stale: float) -> list[Lease]:
        """The jobs still waiting here whose last check is older than `stale`: read in
        the same check as the ones a slot takes now."""
        with self._lock:
            return due_for_check(self._waiting, stale)

    def _ask(self, jobs: list[Job]) -> list[bool]:
        """Which of `jobs` are still held, as the claimer's thread reads it."""
        asked = _Asked(jobs)
        with self._lock:
            if self._checks_closed:
                raise RuntimeError("the claimer has stopped: no check can be made")
            self._asked.append(asked)
        self.wake.set()
        asked.done.wait()
        if asked.error is not None:
            raise asked.error
        return asked.answer

    def answer_checks(self, held: Check) -> None:
        """For the claimer: every check the slots wait for, in one read (`held`)."""
        with self._lock:
            asked, self._asked = self._asked, []
        if not asked:
            return
        try:
            answer = held([job for one in asked for job in one.jobs])
        except Exception as exc:
            for one in asked:
                one.error = exc
                one.done.set()
            return
        at = 0
        for one in asked:
            one.answer, at = answer[at : at + len(one.jobs)], at + len(one.jobs)
            one.done.set()

    def close_checks(self) -> None:
        """The claimer stopped: a check asked from now on fails (the slot puts its
        jobs back, and the worker releases them)."""
        with self._lock:
            self._checks_closed = True
            asked, self._asked = self._asked, []
        for one in asked:
            one.error = RuntimeError("the claimer has stopped: no check can be made")
            one.done.set()

    def _put_back(self, leases: list[Lease]) -> None:
        with self._lock:
            if self.stopping.is_set():
                self._late += leases
                return
            self._waiting.extendleft(reversed(leases))
            self._work.notify(len(leases))
            self._rung()

    def left_over(self) -> list[Lease]:
        """Jobs a slot took back from a failed check while stopping: the worker releases
        them, as the ones it never handed out (W4)."""
        with self._lock:
            late, self._late = self._late, []
        return late

    @property
    def handler_seconds(self) -> float | None:
        """The mean time its handlers ran (`HandlerTimes`): the claimer's prefetch."""
        return self._times.mean

    def ran(self, seconds: float) -> None:
        """A handler ran for `seconds` (a race between two slots loses one sample)."""
        self._times.ran(seconds)

    def more_waiting(self, most: int) -> list[Lease]:
        """Up to `most` more claimed jobs, without waiting: a handler process takes its
        next jobs ahead, so it never waits for its supervisor between two jobs."""
        return self.take(most, wait=False) or []

    def hand_back(self, leases: list[Lease]) -> bool:
        """Jobs a slot took ahead and never started go back to the head of the line, for
        another slot (their handler process is stuck behind a long handler). False once
        stopping: the caller releases them then (W4)."""
        with self._lock:
            if self.stopping.is_set():
                return False
            for lease in leases:
                lease.handed = 0.0
            self._waiting.extendleft(reversed(leases))
            self._work.notify(len(leases))
            self._rung()
        self.wake.set()
        return True

    def any_waiting(self) -> bool:
        """Whether a claimed job waits for a slot to take it."""
        with self._lock:
            return bool(self._waiting)

    def stop(self) -> list[Lease]:
        """Stop handing out jobs; returns the ones claimed but not started."""
        self.stopping.set()
        self.wake.set()
        with self._lock:
            unstarted = list(self._waiting)
            self._waiting.clear()
            self._work.notify_all()
            self._rung()
        return unstarted

    def ring_when_waiting(self, ring: Callable[[], None]) -> bool:
        """For a slot that waits on its child's socket as well (the event-loop process,
        whose free tasks take jobs while others run): `ring` is called once, by the
        thread that next hands out a job or stops the worker, so the slot need not poll
        for either. False when a job waits already, or stopping: look now."""
        with self._lock:
            if self._waiting or self.stopping.is_set():
                return False
            self._ring = ring
            return True

    def stop_ringing(self) -> None:
        """The slot that asked to be rung stops waiting for good: once this returns, its
        `ring` is not called, and the slot may close what it rings."""
        with self._lock:
            self._ring = None

    def _rung(self) -> None:
        """Under the lock: a job waits, or stopping: ring the slot that asked."""
        ring, self._ring = self._ring, None
        if ring is not None:
            ring()

    def acking(self, jobs: int = 1) -> None:
        """Held jobs' completions went to the ack window: their slots are free."""
        with self._lock:
            self._acking += jobs
            due = self._room_made()
        if due:
            self._wake()

    def let_go(self, lease: Lease, *, acked: bool = False) -> None:
        """The job was reported (or left to its lease): room for another claim."""
        with self._lock:
            self._leases.remove(lease)
            if acked:
                self._acking -= 1
            due = self._room_made()
        if due:
            self._wake()

    def wake_for_room(self, active_limit: int, held_limit: int, at_least: int) -> None:
        """The claimer is about to wait: jobs let go wake it once `room(active_limit,
        held_limit)` is `at_least` (or 1, once no claimed job waits for a slot), as
        anything else that sets `wake` does at once. Asked again before each wait."""
        with self._lock:
            self._room_wanted = (active_limit, held_limit, at_least)
            due = self._room_made()
        if due:
            self._wake()

    def _wake(self) -> None:
        """Wake the claimer: `set` only when not set yet (once the room is made, each job
        let go until the claimer runs found it set, and `Event.set` takes its lock)."""
        if not self.wake.is_set():
            self.wake.set()

    def wake_for_any(self) -> None:
        """The claimer is about to wait for work: any job let go wakes it."""
        with self._lock:
            self._room_wanted = None

    def _room_made(self) -> bool:
        """Under the lock: whether the claimer should look again now."""
        wanted = self._room_wanted
        if wanted is None:
            return True
        active_limit, held_limit, at_least = wanted
        return self._room(active_limit, held_limit) >= (at_least if self._waiting else 1)

    def starting(self, slots: int) -> None:
        """`slots` more (or, negative, fewer) slots are starting a handler process: no job
        is claimed for them meanwhile, so none waits under a lease for a start-up."""
        with self._lock:
            self._starting += slots
        self.wake.set()

    def room(self, active_limit: int, held_limit: int) -> int:
        """How many more jobs to claim: until `active_limit` run or wait for a slot
        (minus the slots still starting), and never more than `held_limit` held, ack
        window included."""
        with self._lock:
            return self._room(active_limit, held_limit)

    def _room(self, active_limit: int, held_limit: int) -> int:
        """`room`, under the lock."""
        return room_for_claims(
            active_limit,
            held_limit,
            held=len(self._leases),
            acking=self._acking,
            starting=self._starting,
        )

    def running_long(self, longer_than: float) -> int:
        """How many handed-out jobs have run more than `longer_than` seconds and are not
        being reported: slots that will not free up soon, for which nothing is claimed
        ahead (W9)."""
        since = time.monotonic() - longer_than
        with self._lock:
            return sum(
                1 for lease in self._leases if 0.0 < lease.handed < since and not lease.reporting
            )

    def overdue(self, held_longer_than: float) -> list[Lease]:
        """The claimed jobs not handed out that were claimed more than `held_longer_than`
        seconds ago, taken out: for the worker to release to the other workers' free
        slots (W9)."""
        since = time.monotonic() - held_longer_than
        with self._lock:
            late = [lease for lease in self._waiting if lease.claimed < since]
            for lease in late:
                self._waiting.remove(lease)
        return late

    def running(self) -> list[Lease]:
        """The handed-out jobs not yet being reported, not known lost: whose cancel a
        handler must hear of (W9)."""
        with self._lock:
            return [
                lease
                for lease in self._leases
                if lease.handed and not lease.reporting and not lease.is_lost
            ]

    def busy(self) -> bool:
        """Whether a job runs or waits for a slot (the ack window's do not count)."""
        with self._lock:
            return len(self._leases) > self._acking

    def leases(self) -> list[Lease]:
        with self._lock:
            return list(self._leases)


def due_for_check(waiting: Iterable[AnyLease], stale: float) -> list[AnyLease]:
    """The leases in `waiting`, not yet lost, whose last check (or claim) is older than
    `stale`: the ones a check made now reads too, so the next hand-overs find theirs
    fresh (W9). Both workers' holdings use it."""
    return [lease for lease in waiting if lease.checked < stale and not lease.is_lost]


#: Handler runs timed before the mean is trusted (`HandlerTimes`).
WARM_UP_RUNS = 8


class HandlerTimes:
    """The handlers' mean run time, what the automatic prefetch and the jobs kept ahead
    of a handler process follow: unknown (None) until WARM_UP_RUNS runs were timed, then
    their plain mean, and from there recent runs weigh most.

    Not the first run's time alone: a job that fails at once, first, made a worker
    claim its most ahead on one sample, and a worker then frozen past its lease holds
    all those jobs, each charged an attempt (W7's chaos run, with 128 at most: 30 good
    jobs of 300 ended dead). Until the mean is known, each slot gets one job ahead."""

    __slots__ = ("_runs", "_total", "mean")

    def __init__(self) -> None:
        self.mean: float | None = None
        self._runs = 0
        self._total = 0.0

    def ran(self, seconds: float) -> None:
        """A handler ran `seconds`: averaged until WARM_UP_RUNS were, then followed
        with a weight of 1/16, so the mean keeps up with handlers that change pace."""
        if self.mean is not None:
            self.mean += (seconds - self.mean) / 16
            return
        self._runs += 1
        self._total += seconds
        if self._runs >= WARM_UP_RUNS:
            self.mean = self._total / self._runs


def room_for_claims(
    active_limit: int, held_limit: int, *, held: int, acking: int, starting: int = 0
) -> int:
    """The ack window's sizing, for every worker: claim until `active_limit` jobs run or
    wait for a slot (slots still starting count as busy), never past `held_limit` held
    leases, the jobs whose completions wait in the ack window included."""
    return min(active_limit - starting - (held - acking), held_limit - held)


def next_check_pause(pause: float) -> float:
    return min(pause * 2, 1.0)


class AsyncHoldings:
    """Every job held, from its claim until it was reported: waiting for a task,
    running, or with its completion in the ack window."""

    def __init__(self) -> None:
        self.leases: set[AsyncLease] = set()
        self.waiting: deque[AsyncLease] = deque()
        self.acking = 0
        self._times = HandlerTimes()
        self.work = asyncio.Condition()  # a job is waiting, or stopping
        self.wake = asyncio.Event()  # the claimer should look again
        self.stopping = asyncio.Event()

    async def hand_out(self, jobs: list[Job]) -> None:
        async with self.work:
            for job in jobs:
                lease = AsyncLease(job)
                self.leases.add(lease)
                self.waiting.append(lease)
            self.work.notify(len(jobs))

    async def next_waiting(self, queue: AsyncQueue) -> AsyncLease | None:
        """The next claimed job for a free task, still held (W9): one that waited here
        longer than FRESH_SECONDS since its claim (or last check) is read again first
        (`queue.held`), with every other one waiting that long, so a job cancelled
        while claimed ahead is let go, never started. None once stopping."""
        pause = CHECK_PAUSE
        while True:
            async with self.work:
                await self.work.wait_for(lambda: self.waiting or self.stopping.is_set())
                if self.stopping.is_set():
                    return None
                lease = self.waiting.popleft()
            held = not lease.is_lost
            now = time.monotonic()
            if held and lease.checked < now - FRESH_SECONDS:
                also = due_for_check(self.waiting, now - FRESH_SECONDS)
                try:
                    held, *others = await queue.held([lease.job] + [o.job for o in also])
                    for other, other_held in zip(also, others, strict=True):
                        other.checked = now
                        if not other_held:
                            other.mark_lost()  # let go, unstarted, when a task takes it
                    lease.checked = now
                except Exception as exc:
                    if not connection_lost(exc):  # an outage is the queue's to log, once
                        log.warning("cannot check %s before it starts (%s)", label(lease), exc)
                    await self._put_back(lease)
                    await wait_for(self.stopping, pause)
                    pause = next_check_pause(pause)
                    continue
            if held:
                lease.handed = time.monotonic()
                return lease
            log.info(
                "%s was cancelled (or its lease ended) while claimed ahead: not started",
                label(lease),
            )
            lease.mark_lost()
            self.let_go(lease)

    async def _put_back(self, lease: AsyncLease) -> None:
        """A job whose check failed goes back to the head of the line (released with
        the rest of the waiting ones if a stop comes meanwhile)."""
        async with self.work:
            self.waiting.appendleft(lease)
            self.work.notify(1)

    def running(self) -> list[AsyncLease]:
        """The jobs handed to a task and not yet being reported, not known lost: whose
        cancel a handler must hear of (W9)."""
        return [
            lease
            for lease in self.leases
            if lease.handed and not lease.reporting and not lease.is_lost
        ]

    async def stop(self) -> list[AsyncLease]:
        """Stop handing out jobs; returns the ones claimed but not started."""
        self.stopping.set()
        self.wake.set()
        async with self.work:
            unstarted = list(self.waiting)
            self.waiting.clear()
            self.work.notify_all()
        return unstarted

    @property
    def handler_seconds(self) -> float | None:
        """The mean time its handlers ran (`HandlerTimes`): the claimer's prefetch."""
        return self._times.mean

    def ran(self, seconds: float) -> None:
        """A handler ran for `seconds`."""
        self._times.ran(seconds)

    def to_window(self) -> None:
        """A held job's completion went to the ack window: its task is free."""
        self.acking += 1
        self.wake.set()

    def let_go(self, lease: AsyncLease, *, acked: bool = False) -> None:
        self.leases.discard(lease)
        if acked:
            self.acking -= 1
        self.wake.set()

    def busy(self) -> bool:
        return len(self.leases) > self.acking
