"""OpenTelemetry across processes: the handler's span, in a real worker process, is the
child of the span that enqueued the job, with the job's attributes and, on failure, the
exception; and without a tracing application nothing of OpenTelemetry is imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from queuecore.sql.schema import jobs
from tests.worker.processes import REPO, queuecore_env, run_queuecore

#: Where the worker's registry (tests/traces/traced_jobs.py) writes its spans. That module
#: is never imported here: it sets up a provider of its own for the worker's process.
OUT_VARIABLE = "QUEUECORE_TRACES_TEST_OUT"


@pytest.fixture(scope="module")
def tracer() -> Iterator[trace.Tracer]:
    """This process's own provider (set once per process) and a tracer from it."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)
    yield provider.get_tracer("tests")


def test_the_handler_span_is_the_child_of_the_enqueuing_span(
    make_queue, dsn, db, tracer, tmp_path, monkeypatch
):
    queue = make_queue(clock=None)
    with tracer.start_as_current_span("POST /signup") as request:
        good = queue.enqueue("ok", {}, queue="mail").id
        bad = queue.enqueue("boom", {}, queue="mail", max_attempts=1).id
    untraced = queue.enqueue("ok", {}, queue="mail").id
    with db.connect() as conn:
        stored = dict(conn.execute(sa.select(jobs.c.id, jobs.c.trace_context)).all())
    assert stored[untraced] is None and "traceparent" in json.loads(stored[good])

    out = tmp_path / "spans.json"
    monkeypatch.setenv(OUT_VARIABLE, str(out))
    done = run_queuecore(
        "worker", "tests.traces.traced_jobs:REGISTRY", "--dsn", dsn, "--exit-when-idle", "0.5"
    )
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    spans = {span["attributes"]["queuecore.job.id"]: span for span in map(json.loads, lines)}
    assert len(spans) == len(lines) == 3  # one span per job, written in its handler process

    parent = request.get_span_context()
    for job_id, kind in ((good, "ok"), (bad, "boom")):
        span = spans[job_id]
        assert span["name"] == f"queuecore job {kind}"
        assert (span["trace_id"], span["parent_id"]) == (parent.trace_id, parent.span_id)
        assert span["attributes"] == {
            "queuecore.job.id": job_id,
            "queuecore.job.kind": kind,
            "queuecore.job.queue": "mail",
            "queuecore.job.attempt": 1,
        }
    assert spans[good]["status"] == "UNSET" and spans[good]["events"] == []
    assert spans[bad]["status"] == "ERROR"
    [event] = spans[bad]["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "ValueError"
    assert event["attributes"]["exception.message"] == "no such mailbox"
    # A job enqueued outside any span starts a trace of its own.
    assert spans[untraced]["parent_id"] is None
    assert spans[untraced]["trace_id"] != parent.trace_id


@pytest.mark.parametrize("backend", ["sqlite"])  # about imports, not databases
def test_without_a_tracing_application_nothing_of_opentelemetry_is_imported(dsn):
    script = textwrap.dedent(
        f"""
        import sys
        import queuecore
        q = queuecore.connect({dsn!r})
        q.enqueue("ok", {{}})
        queuecore.Worker(q, {{"ok": lambda job: None}}, exit_when_idle=0.2).run()
        assert q.stats()["queued"] == 0, q.stats()
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        assert not loaded, loaded
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=queuecore_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
