"""`queuecore schedules MODULE:REGISTRY`: what a registry schedules and when it runs next."""

from __future__ import annotations

import re

from tests.worker.processes import run_queuecore

REGISTRY = "tests.periodic.jobs:REGISTRY"


def test_schedules_lists_each_schedule_with_its_next_run(dsn: str) -> None:
    result = run_queuecore("schedules", REGISTRY, "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[2:]}
    assert set(lines) == {"every-second", "nightly"}
    assert re.search(
        r"\* \* \* \* \* \*\s+UTC\s+tick\s+default\s+latest\s+\d{4}-", lines["every-second"]
    )
    nightly = lines["nightly"]
    assert "Europe/Berlin" in nightly and "skip" in nightly
    assert re.search(r"\d{4}-\d\d-\d\d 03:00:00 CES?T$", nightly), nightly


def test_schedules_without_a_dsn_uses_this_hosts_clock() -> None:
    result = run_queuecore("schedules", REGISTRY)  # the environment holds no DSN
    assert result.returncode == 0, result.stderr
    assert "nightly" in result.stdout


def test_a_registry_without_schedules_says_so() -> None:
    result = run_queuecore("schedules", "tests.worker.handlers:REGISTRY")
    assert (result.returncode, result.stdout.strip()) == (
        0,
        "tests.worker.handlers:REGISTRY has no periodic jobs",
    )


def test_a_registry_that_cannot_be_found_is_a_usage_error() -> None:
    result = run_queuecore("schedules", "tests.periodic.nowhere:REGISTRY")
    assert result.returncode == 2
    assert "cannot import" in result.stderr
