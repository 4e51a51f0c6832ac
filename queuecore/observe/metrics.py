"""Prometheus metrics (the `metrics` extra): a worker's own instruments, and the
queue-level gauges read from the database.

The two are kept apart on purpose. A worker knows what it did (jobs finished by outcome,
handler durations, claims, ack flushes, heartbeats, busy slots) and serves that on its
own `--metrics-port`. What the queue holds (jobs by state, the oldest ready age) is one
set of figures for every worker: it is read from the database at scrape time by one
process, `queuecore metrics` or the dashboard's /metrics, never by every worker.

Names follow Prometheus conventions: a `queuecore_` prefix, `_total` counters, base
units (`_seconds`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from queuecore.job import Job
from queuecore.observe.observer import Outcome, Refused, WorkerObserver

CLAIM_SIZES = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500)
DURATIONS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Time in queue runs from milliseconds (an idle worker) to hours (a backlog).
QUEUE_TIMES = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400)


class PrometheusObserver(WorkerObserver):
    """A worker's instruments, in a registry of their own (so two workers in one process,
    or a test, never share counters)."""

    def __init__(self, *, slots: int, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._finished = Counter(
            "queuecore_jobs_finished",
            "Job runs whose report was taken or refused, by outcome "
            "(done, retried, dead; refused: lease_lost, cancelled).",
            ["queue", "kind", "outcome"],
            registry=r,
        )
        self._duration = Histogram(
            "queuecore_handler_duration_seconds",
            "How long handlers ran, returned or raised.",
            ["queue", "kind"],
            buckets=DURATIONS,
            registry=r,
        )
        self._queue_time = Histogram(
            "queuecore_job_queue_seconds",
            "How long jobs waited from ready (enqueued, delay or backoff over, lease lost) "
            "to their handler's start.",
            ["queue", "kind"],
            buckets=QUEUE_TIMES,
            registry=r,
        )
        self._claims = Counter("queuecore_claims", "Claims made by this worker.", registry=r)
        self._claim_size = Histogram(
            "queuecore_claim_size_jobs",
            "Jobs handed out per claim (0: none was ready).",
            buckets=CLAIM_SIZES,
            registry=r,
        )
        self._flushes = Counter(
            "queuecore_ack_flushes",
            "Batches of completions the ack window sent, by result (committed, failed).",
            ["result"],
            registry=r,
        )
        self._flush_size = Histogram(
            "queuecore_ack_flush_size_jobs",
            "Completions per ack-window flush.",
            buckets=CLAIM_SIZES[1:],
            registry=r,
        )
        self._heartbeats = Counter(
            "queuecore_heartbeats", "Lease extensions that held.", registry=r
        )
        self._lost = Counter(
            "queuecore_leases_lost",
            "Heartbeats that found their job no longer held by this worker, by reason "
            "(lease_lost: it ran out and the job went on elsewhere; cancelled).",
            ["reason"],
            registry=r,
        )
        self._outage = Gauge(
            "queuecore_database_outage",
            "1 while the last claim found the database out of reach, else 0.",
            registry=r,
        )
        self._busy = Gauge("queuecore_slots_busy", "Slots running a handler now.", registry=r)
        Gauge("queuecore_slots", "Slots of this worker (--concurrency).", registry=r).set(slots)
        self._lock = threading.Lock()

    def claimed(self, jobs: int) -> None:
        self._claims.inc()
        self._claim_size.observe(jobs)
        self._outage.set(0)

    def unreachable(self) -> None:
        self._outage.set(1)

    def handler_started(self, job: Job) -> None:
        self._busy.inc()
        if job.ready_at is not None:
            # ready_at is on the queue's clock (the server's, R20), now on this host's:
            # a skew between them shows here, and never as a negative wait.
            waited = max(0.0, time.time() - job.ready_at.timestamp())
            self._queue_time.labels(job.queue, job.kind).observe(waited)

    def handler_ended(self, job: Job, seconds: float) -> None:
        self._busy.dec()
        self._duration.labels(job.queue, job.kind).observe(seconds)

    def finished(self, job: Job, outcome: Outcome) -> None:
        self._finished.labels(job.queue, job.kind, outcome).inc()

    def acks_flushed(self, jobs: int, committed: bool) -> None:
        self._flushes.labels("committed" if committed else "failed").inc()
        self._flush_size.observe(jobs)

    def heartbeat(self, held: bool, refused: Refused = "lease_lost") -> None:
        if held:
            self._heartbeats.inc()
        else:
            self._lost.labels(refused).inc()

    def serve(self, port: int, host: str = "127.0.0.1") -> Any:
        """/metrics on `host:port`, from a daemon thread; returns the server."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server


class QueueCollector(Collector):
    """The queue's own figures, read from the database at each scrape through the
    dashboard's statements (the partial indexes only: a scrape costs what `stats` does)."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from queuecore.observe.queries import read_overview  # no web dependency in it

        with self.queue.engine.connect() as conn:
            overview = read_overview(conn, self.queue.now())
        jobs = GaugeMetricFamily(
            "queuecore_jobs",
            "Jobs in the database by queue, kind and state (done jobs are not counted: "
            "see queuecore_jobs_finished_last_hour).",
            labels=["queue", "kind", "state"],
        )
        for (queue, kind, state), count in sorted(overview.by_kind.items()):
            jobs.add_metric([queue, kind, state], count)
        oldest = GaugeMetricFamily(
            "queuecore_oldest_ready_age_seconds",
            "How long the oldest ready job has waited, by queue and kind.",
            labels=["queue", "kind"],
        )
        for (queue, kind), age in sorted(overview.oldest_by_kind.items()):
            oldest.add_metric([queue, kind], age)
        finished = GaugeMetricFamily(
            "queuecore_jobs_finished_last_hour",
            "Jobs that became done or dead over the last hour, by queue.",
            labels=["queue", "state"],
        )
        for figures in overview.queues:
            finished.add_metric([figures.name, "done"], figures.done_last_hour)
            finished.add_metric([figures.name, "dead"], figures.dead_last_hour)
        yield from (jobs, oldest, finished)


def queue_registry(queue: Any) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(QueueCollector(queue))
    return registry
