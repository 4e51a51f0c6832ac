"""A worker's registry that traces, as an application would: it sets up the OpenTelemetry
SDK with an exporter of its own that appends every finished span, as one JSON line, to
the file named by QUEUECORE_TRACES_TEST_OUT. Handlers run in handler processes (W7),
which end without running atexit hooks, so each span is written as it ends."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from queuecore import Job

OUT_VARIABLE = "QUEUECORE_TRACES_TEST_OUT"


class JsonLinesExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        out = os.environ.get(OUT_VARIABLE)
        if out is None:
            return SpanExportResult.SUCCESS
        with open(out, "a") as lines:
            for span in spans:
                record = {
                    "name": span.name,
                    "trace_id": span.context.trace_id,
                    "span_id": span.context.span_id,
                    "parent_id": span.parent.span_id if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                    "status": span.status.status_code.name,
                    "events": [
                        {"name": e.name, "attributes": dict(e.attributes or {})}
                        for e in span.events
                    ],
                }
                lines.write(json.dumps(record) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter()))
trace.set_tracer_provider(provider)


def ok(job: Job) -> None:
    return None


def boom(job: Job) -> None:
    raise ValueError("no such mailbox")


REGISTRY = {"ok": ok, "boom": boom}
