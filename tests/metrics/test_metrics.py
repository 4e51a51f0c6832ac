"""Prometheus metrics from real processes, scraped over HTTP and read with
prometheus_client's own parser: a worker's counters after a known mix are exactly that
mix (a refused report counted as cancelled or lease lost, as the row says); the queue
gauges of `queuecore metrics` and the dashboard's /metrics are what the table holds."""

from __future__ import annotations

import signal
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from queuecore.sql.schema import jobs
from tests.dashboard.browser import dashboard, free_port
from tests.metrics.jobs import DSN_VARIABLE
from tests.worker.processes import queuecore_process

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def by(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """A metric's samples keyed by the values of `labels` (all it has), in that order."""
    found = {}
    for key, value in samples.get(name, {}).items():
        assert {label for label, _ in key} == set(labels), key
        found[tuple(dict(key)[label] for label in labels)] = value
    return found


def wait_for(condition, log: Path, proc, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the process ended early:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"timed out; it said:\n{log.read_text()}"
        time.sleep(0.1)


def run_worker(dsn: str, log: Path, runs: int, lease_seconds: float) -> Samples:
    """A real worker on the mix enqueued, scraped once it reported `runs` job runs."""
    port = free_port()
    args = ("worker", "tests.metrics.jobs:REGISTRY", "--dsn", dsn, "--concurrency", "2")
    args += ("--metrics-port", str(port), "--lease-seconds", str(lease_seconds))
    args += ("--poll-interval", "0.2")
    with queuecore_process(*args, log=log) as proc:
        url = f"http://127.0.0.1:{port}/metrics"

        def settled() -> bool:
            try:
                finished = scrape(url)["queuecore_jobs_finished_total"]
            except OSError:
                return False  # not listening yet
            return sum(finished.values()) >= runs

        wait_for(settled, log, proc)
        samples = scrape(url)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    return samples


def test_a_workers_counters_are_exactly_its_known_mix(make_queue, dsn, db, tmp_path, monkeypatch):
    queue = make_queue(clock=None)
    enqueued = time.time()
    queue.enqueue_many("ok", [{}] * 5)
    queue.enqueue_many("flaky", [{}] * 2)
    queue.enqueue_many("bad", [{}] * 2)
    queue.enqueue("hopeless", {}, max_attempts=1)
    queue.enqueue("stolen", {})
    queue.enqueue("cancelled", {})
    enqueued_by = time.time()
    time.sleep(1)  # before the worker starts: every first attempt waits at least this long
    waited_at_least = time.time() - enqueued_by
    monkeypatch.setenv(DSN_VARIABLE, dsn)
    samples = run_worker(dsn, tmp_path / "worker.log", runs=14, lease_seconds=120)
    waited_at_most = time.time() - enqueued

    assert by(samples, "queuecore_jobs_finished_total", "queue", "kind", "outcome") == {
        ("default", "ok", "done"): 5,
        ("default", "flaky", "retried"): 2,
        ("default", "flaky", "done"): 2,
        ("default", "bad", "dead"): 2,
        ("default", "hopeless", "dead"): 1,
        ("default", "stolen", "lease_lost"): 1,
        ("default", "cancelled", "cancelled"): 1,
    }
    runs = {
        ("default", "ok"): 5,
        ("default", "flaky"): 4,
        ("default", "bad"): 2,
        ("default", "hopeless"): 1,
        ("default", "stolen"): 1,
        ("default", "cancelled"): 1,
    }
    assert by(samples, "queuecore_handler_duration_seconds_count", "queue", "kind") == runs
    # Time in queue: one observation per run, from the job's ready time (the enqueue, or
    # the retry's end) to its handler's start; the first attempts all waited >= 1 s.
    assert by(samples, "queuecore_job_queue_seconds_count", "queue", "kind") == runs
    waits = by(samples, "queuecore_job_queue_seconds_sum", "queue", "kind")
    assert 5 * waited_at_least <= waits[("default", "ok")] <= 5 * waited_at_most
    ok_buckets = by(samples, "queuecore_job_queue_seconds_bucket", "queue", "kind", "le")
    assert ok_buckets[("default", "ok", "0.5")] == 0 and ok_buckets[("default", "ok", "+Inf")] == 5
    # Every run was claimed once, and so was each job claimed ahead that the worker gave
    # back unstarted while both slots ran long (W9's claim-ahead budget: on a loaded
    # machine a quick handler can count as long).
    released = (tmp_path / "worker.log").read_text().count("released unstarted")
    assert samples["queuecore_claim_size_jobs_sum"][()] == 14 + released
    # One observation per claim. The idle worker's empty claims go on while the scrape
    # reads the counter, then the histogram: one claim may fall between the two reads.
    claims = samples["queuecore_claims_total"][()]
    assert claims <= samples["queuecore_claim_size_jobs_count"][()] <= claims + 1
    # Completions go through the ack window (done, lease lost, cancelled); failures do not.
    assert samples["queuecore_ack_flush_size_jobs_sum"][()] == 9
    assert by(samples, "queuecore_ack_flushes_total", "result") == {
        ("committed",): samples["queuecore_ack_flush_size_jobs_count"][()]
    }
    assert samples["queuecore_slots"][()] == 2
    assert samples["queuecore_slots_busy"][()] == 0
    assert samples["queuecore_database_outage"][()] == 0
    with db.connect() as conn:
        states = dict(
            conn.execute(sa.select(jobs.c.state, sa.func.count()).group_by(jobs.c.state)).all()
        )
    assert states == {"done": 7, "dead": 3, "running": 1, "cancelled": 1}  # running: stolen


def test_a_refused_heartbeat_says_cancelled_or_lease_lost(make_queue, dsn, tmp_path, monkeypatch):
    """Short leases, so heartbeats come often: each handler waits until one is refused.
    One lasting attempt each, so the stolen job, lapsed, is not claimed again (R08)."""
    queue = make_queue(clock=None)
    queue.enqueue("stolen_then_waits", {}, max_attempts=1)
    queue.enqueue("cancelled_then_waits", {}, max_attempts=1)
    monkeypatch.setenv(DSN_VARIABLE, dsn)
    samples = run_worker(dsn, tmp_path / "worker.log", runs=2, lease_seconds=2)

    assert by(samples, "queuecore_leases_lost_total", "reason") == {
        ("lease_lost",): 1,
        ("cancelled",): 1,
    }
    assert by(samples, "queuecore_jobs_finished_total", "queue", "kind", "outcome") == {
        ("default", "stolen_then_waits", "lease_lost"): 1,
        ("default", "cancelled_then_waits", "cancelled"): 1,
    }


def test_queue_gauges_from_the_exporter_and_the_dashboard(make_queue, dsn, tmp_path):
    queue = make_queue(clock=None)
    queue.enqueue_many("a", [{}] * 3, queue="q1")
    queue.enqueue("b", {}, queue="q1", delay=3600)
    queue.enqueue_many("a", [{}] * 2, queue="q2")
    _running, dead, done = queue.claim("w", limit=3, queues=["q1"])
    queue.fail(dead, "boom", permanent=True)
    queue.complete(done)
    expected_jobs = {
        ("q1", "b", "queued"): 1,
        ("q1", "a", "running"): 1,
        ("q1", "a", "dead"): 1,
        ("q2", "a", "queued"): 2,
    }
    port = free_port()
    log = tmp_path / "exporter.log"
    with queuecore_process("metrics", "--dsn", dsn, "--port", str(port), log=log) as proc:
        url = f"http://127.0.0.1:{port}/metrics"

        def answers() -> bool:
            try:
                scrape(url)
            except OSError:
                return False
            return True

        wait_for(answers, log, proc)
        exported = scrape(url)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    with dashboard(dsn, tmp_path / "dashboard.log") as base:
        served = scrape(base + "/metrics")

    for samples in (exported, served):
        assert by(samples, "queuecore_jobs", "queue", "kind", "state") == expected_jobs
        ages = by(samples, "queuecore_oldest_ready_age_seconds", "queue", "kind")
        assert set(ages) == {("q2", "a")} and ages[("q2", "a")] >= 0
        finished = by(samples, "queuecore_jobs_finished_last_hour", "queue", "state")
        assert finished == {
            ("q1", "done"): 1,
            ("q1", "dead"): 1,
            ("q2", "done"): 0,
            ("q2", "dead"): 0,
        }
