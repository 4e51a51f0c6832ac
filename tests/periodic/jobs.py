"""The registry the worker processes of the periodic tests run: one schedule a second,
and one an hour that never comes due during a test (it only has to be listed)."""

import queuecore

REGISTRY = queuecore.Registry()


@REGISTRY.periodic("* * * * * *", "tick", {"source": "every second"}, name="every-second")
def tick(job: queuecore.Job) -> None:
    """Nothing to do: the test reads the jobs' rows (one per tick, each run once)."""


REGISTRY.periodic("0 3 * * *", "report", timezone="Europe/Berlin", missed="skip", name="nightly")
REGISTRY.add("report", tick)
