"""Every job a worker holds, shared by its roles: the claimer adds jobs, slots take the
waiting ones, the reporter lets them go, the lease keeper renews them all.

A job is held from its claim until it was reported (or left to its lease); while its
completion waits in the ack window it still counts as held, not as active. Leases, not
job ids, are held: a job whose lease ran out can be claimed again by this very worker
while its first run is still being reported.
"""

from __future__ import annotations

import threading
from collections import deque

from queuecore.handling import Lease
from queuecore.job import Job


class Holdings:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: set[Lease] = set()  # every job held: waiting, running or acking
        self._waiting: deque[Lease] = deque()  # claimed, not yet started
        self._acking = 0  # how many of the held jobs wait in the ack window
        self._starting = 0  # slots whose handler process is starting: no job for them yet
        self._work = threading.Condition(self._lock)  # a job is waiting, or stopping
        #: The mean time its handlers ran (recent runs weigh most): the claimer's prefetch.
        self.handler_seconds: float | None = None
        #: The claimer should look again: a slot freed up, a notification, or a stop.
        self.wake = threading.Event()
        self.stopping = threading.Event()

    def hand_out(self, jobs: list[Job]) -> None:
        with self._lock:
            for job in jobs:
                lease = Lease(job)
                self._leases.add(lease)
                self._waiting.append(lease)
            self._work.notify(len(jobs))

    def next_waiting(self) -> Lease | None:
        """The next claimed job for a free slot; None once stopping."""
        with self._lock:
            while not self._waiting and not self.stopping.is_set():
                self._work.wait()
            if self.stopping.is_set():
                return None
            return self._waiting.popleft()

    def ran(self, seconds: float) -> None:
        """A handler ran for `seconds` (a race between two slots loses one sample)."""
        self.handler_seconds = running_mean(self.handler_seconds, seconds)

    def more_waiting(self, most: int) -> list[Lease]:
        """Up to `most` more claimed jobs, without waiting: a handler process takes its
        next jobs ahead, so it never waits for its supervisor between two jobs."""
        with self._lock:
            if self.stopping.is_set():
                return []
            taken = [self._waiting.popleft() for _ in range(min(most, len(self._waiting)))]
        return taken

    def hand_back(self, leases: list[Lease]) -> bool:
        """Jobs a slot took ahead and never started go back to the head of the line, for
        another slot (their handler process is stuck behind a long handler). False once
        stopping: the caller releases them then (W4)."""
        with self._lock:
            if self.stopping.is_set():
                return False
            self._waiting.extendleft(reversed(leases))
            self._work.notify(len(leases))
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
        return unstarted

    def acking(self) -> None:
        """A held job's completion went to the ack window: its slot is free."""
        with self._lock:
            self._acking += 1
        self.wake.set()

    def let_go(self, lease: Lease, *, acked: bool = False) -> None:
        """The job was reported (or left to its lease): room for another claim."""
        with self._lock:
            self._leases.remove(lease)
            if acked:
                self._acking -= 1
        self.wake.set()

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
            return room_for_claims(
                active_limit,
                held_limit,
                held=len(self._leases),
                acking=self._acking,
                starting=self._starting,
            )

    def busy(self) -> bool:
        """Whether a job runs or waits for a slot (the ack window's do not count)."""
        with self._lock:
            return len(self._leases) > self._acking

    def leases(self) -> list[Lease]:
        with self._lock:
            return list(self._leases)


def running_mean(mean: float | None, seconds: float) -> float:
    """The handlers' mean run time with one more run, recent runs weighing most: what
    every claimer's automatic prefetch follows."""
    return seconds if mean is None else mean + (seconds - mean) / 16


def room_for_claims(
    active_limit: int, held_limit: int, *, held: int, acking: int, starting: int = 0
) -> int:
    """The ack window's sizing, for every worker: claim until `active_limit` jobs run or
    wait for a slot (slots still starting count as busy), never past `held_limit` held
    leases, the jobs whose completions wait in the ack window included."""
    return min(active_limit - starting - (held - acking), held_limit - held)
