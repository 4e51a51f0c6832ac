"""What a worker tells whoever watches it: the narrow interface between the worker and
its instruments (Prometheus in `queuecore.observe.metrics`; anything else a user plugs in).

Every method is a no-op here, so the worker calls them unconditionally and costs nothing
when nobody watches; an observer overrides what it needs. They are called from the
worker's threads (claimer, slots, heartbeat, ack window) and must be quick and never
raise: they run on the worker's hot path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from queuecore.job import Job, JobSnapshot
from queuecore.observe.worklog import describe, log
from queuecore.protocol import Queue

if TYPE_CHECKING:
    from queuecore.protocol import AsyncQueue

#: Why the fence refused a report or a heartbeat: the job was `cancelled` (R25), or the
#: lease was lost otherwise (it ran out and another claim took the job over, or the job
#: was finished elsewhere, or is dead by R08).
Refused = Literal["lease_lost", "cancelled"]
#: How a job's run ended, as the worker saw it: its report was taken, or refused.
Outcome = Literal["done", "retried", "dead", "lease_lost", "cancelled"]


class WorkerObserver:
    def claimed(self, jobs: int) -> None:
        """A claim answered with `jobs` jobs (0 included): the database is reachable."""

    def unreachable(self) -> None:
        """A claim found the database out of reach (an outage until the next `claimed`)."""

    def handler_started(self, job: Job) -> None:
        """A slot started running `job`'s handler."""

    def handler_ended(self, job: Job, seconds: float) -> None:
        """`job`'s handler returned or raised after `seconds`; its slot is free."""

    def finished(self, job: Job, outcome: Outcome) -> None:
        """The report of `job`'s run was taken, or refused (`lease_lost`, `cancelled`)."""

    def acks_flushed(self, jobs: int, committed: bool) -> None:
        """The ack window committed (or failed to commit) a batch of `jobs` completions."""

    def heartbeat(self, held: bool, refused: Refused = "lease_lost") -> None:
        """A lease was extended (`held`), or the heartbeat was refused, for `refused`."""


NO_OBSERVER = WorkerObserver()


def why_refused(queue: Queue, job: Job) -> Refused:
    """The fence refused a report or heartbeat of `job`: one read of its row says why.
    Called on that rare path only, so the hot path stays one statement per report. The
    read goes through `statements.seen` (`Queue.get`), so a lease that ended on the last
    attempt reads as dead (R08), a lost lease. When the read fails, nobody can tell:
    it counts as a lost lease, as before the distinction was made."""
    try:
        snapshot = queue.get(job.id)
    except Exception as exc:
        log.debug("job %s: why the fence refused it is unknown (%s)", job.id, describe(exc))
        return "lease_lost"
    return _refusal_of(snapshot)


async def why_refused_async(queue: AsyncQueue, job: Job) -> Refused:
    """`why_refused` for the workers on an event loop."""
    try:
        snapshot = await queue.get(job.id)
    except Exception as exc:
        log.debug("job %s: why the fence refused it is unknown (%s)", job.id, describe(exc))
        return "lease_lost"
    return _refusal_of(snapshot)


def _refusal_of(snapshot: JobSnapshot | None) -> Refused:
    return "cancelled" if snapshot is not None and snapshot.state == "cancelled" else "lease_lost"
