"""R20 on PostgreSQL: the server's clock decides leases, so workers whose own clocks
are minutes off neither steal a live lease nor get one that has already run out."""

from __future__ import annotations

import pytest

from tests.faults.helpers import run_actor, scalar

LEASE = 60.0
BEHIND, AHEAD = -600.0, +600.0  # ten minutes either way


def server_now(dsn: str) -> float:
    return scalar(dsn, "SELECT extract(epoch FROM clock_timestamp())::float8")


@pytest.mark.postgresql_only
@pytest.mark.parametrize("backend", ["postgresql"])
def test_skewed_worker_clocks_cannot_break_leases(backend, private_dsn):
    def skewed(skew: float, action: str):
        return run_actor("skewed", repr(skew), private_dsn, action, repr(LEASE))

    # Enqueued by a clock ten minutes fast: ready now, not in ten minutes.
    job_id = skewed(AHEAD, "enqueue")
    # Claimed by a clock ten minutes slow: it gets the job, with a lease that is live
    # by the server's clock (a local-clock lease would have ended nine minutes ago).
    before = server_now(private_dsn)
    (claimed,) = skewed(BEHIND, "claim")
    after = server_now(private_dsn)
    assert claimed["id"] == job_id
    assert before + LEASE <= claimed["lease_expires_at"] <= after + LEASE
    # A clock ten minutes fast sees the lease as long over; the server does not.
    assert skewed(AHEAD, "claim") == []
    assert scalar(private_dsn, "SELECT attempts FROM queuecore_jobs") == 1
