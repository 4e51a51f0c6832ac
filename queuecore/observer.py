"""What a worker tells whoever watches it: the narrow interface between the worker and
its instruments (Prometheus in `queuecore.metrics`; anything else a user plugs in).

Every method is a no-op here, so the worker calls them unconditionally and costs nothing
when nobody watches; an observer overrides what it needs. They are called from the
worker's threads (claimer, slots, heartbeat, ack window) and must be quick and never
raise: they run on the worker's hot path."""

from __future__ import annotations

from typing import Literal

from queuecore.job import Job

#: How a job's run ended, as the worker saw it. `lease_lost`: the fence refused the
#: report (another claim took the job over, or it was finished elsewhere).
Outcome = Literal["done", "retried", "dead", "lease_lost"]


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
        """The report of `job`'s run was taken (or refused: `lease_lost`)."""

    def acks_flushed(self, jobs: int, committed: bool) -> None:
        """The ack window committed (or failed to commit) a batch of `jobs` completions."""

    def heartbeat(self, held: bool) -> None:
        """A lease was extended (`held`), or the heartbeat found the job lost."""


NO_OBSERVER = WorkerObserver()
