"""OpenTelemetry traces (the `traces` extra): a job's handler span is a child of the span
that enqueued it, across processes and hosts.

Enqueue stores the caller's trace context (W3C `traceparent`, through the globally set
propagator) in the job's `trace_context` column; the worker extracts it and runs the
handler inside a span of its own, with the job's id, kind, queue and attempt, recording
the exception when the handler raises.

queuecore never imports OpenTelemetry itself: only when the application already has
(`opentelemetry.trace` is in `sys.modules`) is there a trace to carry on. An application
without the extra, or one that does not trace, pays one dictionary lookup per job.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from queuecore.job import Job

_API = "opentelemetry.trace"
TRACER_NAME = "queuecore"
#: How long a handler process waits for its last spans to be sent before it exits.
FLUSH_MILLIS = 5_000


def current_context() -> str | None:
    """The caller's trace context as stored text, or None when nothing is being traced."""
    if _API not in sys.modules:
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier, sort_keys=True) if carrier else None


@contextmanager
def handler_span(job: Job) -> Iterator[None]:
    """The span a handler runs in: a child of the enqueuing span when the job has one."""
    if _API not in sys.modules:
        yield
        return
    from opentelemetry import propagate, trace

    parent = None
    if job.trace_context:
        try:
            parent = propagate.extract(json.loads(job.trace_context))
        except ValueError:  # not ours to fail a job over: the span starts a new trace
            parent = None
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"queuecore job {job.kind}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "queuecore.job.id": job.id,
            "queuecore.job.kind": job.kind,
            "queuecore.job.queue": job.queue,
            "queuecore.job.attempt": job.attempts,
        },
        record_exception=True,
        set_status_on_exception=True,
    ):
        yield


def flush() -> None:
    """Send the spans a batching exporter still holds: a handler process ends with
    `os._exit` (W7), which runs no atexit hook, so an SDK cannot flush by itself."""
    if _API not in sys.modules:
        return
    from opentelemetry import trace

    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is not None:
        force_flush(FLUSH_MILLIS)
