"""A claim planned on statistics that no longer hold, noticed and mended (PostgreSQL).

The claim's ORDER BY … LIMIT is the ready index's own order, so a planner that knows a
backlog is there walks the index and stops at the limit. One whose statistics were
taken when few rows were live (a fresh table, or one of millions of finished rows, when
a burst arrives) guesses a handful, reads every ready row and sorts them, for every
claim, until autovacuum analyzes the table on its next round, up to a minute later:
measured, 60,000 jobs drained by one worker at 5,000 jobs/s, 20,000 analyzed.

So a queue whose claim came back full (a backlog) asks the server, at most every
CHECK_SECONDS, how it plans that claim, and when the plan sorts, has the table analyzed
(`Backend.refresh_statistics`). A planner that already walks the index costs one
EXPLAIN per CHECK_SECONDS of full claims, nothing more. A plan that still sorts at the
next look after an analyze is the planner's informed choice (a claim of a few queues
out of a large backlog may sort them): it is left alone for SETTLED_SECONDS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from queuecore.core.plans import Hot, Outcome

if TYPE_CHECKING:
    from queuecore.job import Job
    from queuecore.sql.compiled import Compiled

#: The shortest time between two looks at the claim's plan, per queue.
CHECK_SECONDS = 30.0
#: How long a plan that sorted even with fresh statistics is not looked at again.
SETTLED_SECONDS = 600.0


class ClaimSortCheck(NamedTuple):
    """How a backend asks for a statement's plan (`explain`, put before its SQL), and
    whether the plan's rows (`sorts`) say that it sorts what it reads."""

    explain: str
    sorts: Callable[[list[tuple[Any, ...]]], bool]


class StatisticsWatch:
    """One queue's look at its claim's plan; `refresh` is the backend's statement that
    brings the statistics up to date."""

    def __init__(self, check: ClaimSortCheck, refresh: Compiled) -> None:
        self._check = check
        self._refresh = refresh
        self._next = 0.0
        self._analyzed = False  # at the last look: the next one then trusts the plan

    def after_full_claim(
        self, claim: Compiled, params: Mapping[str, Any], jobs: list[Job]
    ) -> list[Job] | Hot[list[Job]]:
        """The jobs, after a look at the claim's plan when one is due."""
        now = time.monotonic()
        if now < self._next:
            return jobs
        self._next = now + CHECK_SECONDS
        check, refresh = self._check, self._refresh

        def looked(outcomes: list[Outcome]) -> list[Job] | Hot[list[Job]]:
            sorts, analyzed = check.sorts(outcomes[0][1]), self._analyzed
            self._analyzed = sorts and not analyzed
            if not sorts:
                return jobs
            if analyzed:
                self._next = time.monotonic() + SETTLED_SECONDS
                return jobs
            return Hot([(refresh, {})], lambda _: jobs)

        return Hot([(claim.prefixed(check.explain), params)], looked)
