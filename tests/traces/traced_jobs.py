"""A worker's registry that traces, as an application would: it sets up the OpenTelemetry
SDK with an in-memory exporter, and writes the spans it finished to the file named by
QUEUECORE_TRACES_TEST_OUT when the worker process exits."""

from __future__ import annotations

import atexit
import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from queuecore import Job

OUT_VARIABLE = "QUEUECORE_TRACES_TEST_OUT"

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


@atexit.register
def _write_spans() -> None:
    if OUT_VARIABLE not in os.environ:
        return
    spans = [
        {
            "name": span.name,
            "trace_id": span.context.trace_id,
            "span_id": span.context.span_id,
            "parent_id": span.parent.span_id if span.parent else None,
            "attributes": dict(span.attributes or {}),
            "status": span.status.status_code.name,
            "events": [
                {"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events
            ],
        }
        for span in exporter.get_finished_spans()
    ]
    with open(os.environ[OUT_VARIABLE], "w") as out:
        json.dump(spans, out)


def ok(job: Job) -> None:
    return None


def boom(job: Job) -> None:
    raise ValueError("no such mailbox")


REGISTRY = {"ok": ok, "boom": boom}
