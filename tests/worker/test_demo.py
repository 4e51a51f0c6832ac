"""`queuecore demo`, the README's first command, ends in PASS (smaller and faster here)."""

from __future__ import annotations

import pytest

from tests.worker.processes import run_queuecore

# A kill about every 3 s: at 1.5 s, on a loaded machine where a worker took up to 7 s to
# start (CI of 27ac1bd), a `slow` job (1.5 leases of work) met a kill on each of its 8
# attempts, and the demo rightly said FAIL. Its subject here is the demo's end to end.
SMALLER = ("--jobs", "60", "--workers", "3", "--lease-seconds", "1", "--kill-every", "3")


@pytest.mark.slow
def test_the_demo_passes_and_exits_0(backend, request):
    # On SQLite exactly as the README has it: the demo makes its own database file.
    where = () if backend == "sqlite" else ("--dsn", request.getfixturevalue("dsn"))
    done = run_queuecore("demo", *SMALLER, *where, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = done.stdout.strip().splitlines()[-1]
    assert verdict.startswith("VERDICT: PASS"), done.stdout
    for kind in ("ordinary", "flaky", "slow", "stall", "poison", "hopeless"):
        assert f"\n{kind} " in done.stdout  # one verdict row per kind
