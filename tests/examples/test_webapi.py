"""The tutorial's web API for real, on both backends: uvicorn and `queuecore worker` as
processes, httpx as the client. A few hundred requests with retried idempotency keys,
jobs that retry, jobs that fail for good, a cancel, and a SIGTERM to the worker while it
works; then the database must show every job ended as it should, and no key made two.

Set QUEUECORE_EXAMPLE_TRANSCRIPT=FILE to keep a readable excerpt of the requests and
answers of the run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

import queuecore
from queuecore.sql.schema import jobs
from tests.worker.processes import REPO, queuecore_env, queuecore_process, wait_until

THUMBNAILS, FLAKY, INVOICES, SHORT_EXPORTS = 150, 15, 20, 8
FAIL_TIMES = 2
WORKER = (
    "worker",
    "examples.webapi.jobs:REGISTRY",
    "--concurrency",
    "4",
    "--lease-seconds",
    "5",
    "--backoff-base",
    "0.05",
    "--backoff-cap",
    "0.2",
    "--poll-interval",
    "0.2",
    "--grace-seconds",
    "15",
)


class Transcript:
    """Requests and answers as a person at a terminal would see them."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.requests = 0
        self.repeats = 0

    def record(self, response: httpx.Response) -> None:
        response.read()
        request = response.request
        head = f"{request.method} {request.url.raw_path.decode()}"
        key = request.headers.get("idempotency-key")
        body = request.content.decode() if request.content else ""
        asked = (
            f"> {head}"
            + (f"  [Idempotency-Key: {key}]" if key else "")
            + (f"  {body}" if body else "")
        )
        self.requests += 1
        shown = {
            k: response.headers[k] for k in ("location", "retry-after") if k in response.headers
        }
        extra = "".join(f"  [{k.title()}: {v}]" for k, v in shown.items())
        answer = f"< {response.status_code}{extra}  {response.text}"
        if self.lines[-2:] == [asked, answer]:  # a client polling: said once, with a count
            self.repeats += 1
            return
        self._flush_repeats()
        self.lines += [asked, answer]

    def _flush_repeats(self) -> None:
        if self.repeats:
            self.lines.append(f"  (the same request and answer {self.repeats} more times)")
            self.repeats = 0

    def note(self, text: str) -> None:
        self._flush_repeats()
        self.lines.append(f"# {text}")

    def save(self, path: str, head: int = 40, tail: int = 16) -> None:
        """The start and the end, and between them the notes and every answer that is
        not a plain 200/202 (conflicts, refusals, cancels), each with its request."""
        self._flush_repeats()
        middle = self.lines[head:-tail]
        kept, skipped = [], 0
        for i, line in enumerate(middle):
            notable = line.startswith("#") or (
                line.startswith("< ") and not line.startswith(("< 200", "< 202"))
            )
            asked = i + 1 < len(middle) and middle[i + 1].startswith("< ")
            if notable or (asked and not middle[i + 1].startswith(("< 200", "< 202"))):
                if skipped:
                    kept.append(f"  ... {skipped} lines ...")
                    skipped = 0
                kept.append(line)
            else:
                skipped += 1
        if skipped:
            kept.append(f"  ... {skipped} lines ...")
        lines = [*self.lines[:head], *kept, *self.lines[-tail:]]
        Path(path).write_text("\n".join(lines) + "\n")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(dsn: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = tmp_path / "uvicorn.log"
    env = {**queuecore_env(), "QUEUECORE_DSN": dsn}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "examples.webapi.app:app",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/jobs/0").status_code == 404
        except httpx.TransportError:
            return False

    try:
        wait_until(up, proc, log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def thumbnail_payload(i: int) -> dict[str, int]:
    return {"width": 400 + i, "height": 300, "box": 200}


def expected_thumbnail(i: int) -> dict[str, int]:
    p = thumbnail_payload(i)
    scale = min(p["box"] / p["width"], p["box"] / p["height"], 1.0)
    return {"width": round(p["width"] * scale), "height": round(p["height"] * scale)}


def test_the_web_api_example_end_to_end(server: str, dsn: str, tmp_path: Path) -> None:
    seen = Transcript()
    client = httpx.Client(base_url=server, timeout=30, event_hooks={"response": [seen.record]})
    ids: dict[str, int] = {}

    def post(key: str, kind: str, payload: dict[str, Any], expect: int = 202) -> httpx.Response:
        response = client.post(
            "/jobs", json={"kind": kind, "payload": payload}, headers={"Idempotency-Key": key}
        )
        assert response.status_code == expect, response.text
        if expect in (200, 202):
            assert response.headers["location"] == f"/jobs/{response.json()['id']}"
        return response

    with queuecore_process(*WORKER, "--dsn", dsn, log=tmp_path / "worker-a.log") as worker_a:
        # A long export, cancelled while it runs: its handler sees the lease lost and stops.
        ids["long"] = post("long", "export", {"steps": 600, "step_seconds": 0.05}).json()["id"]
        for i in range(SHORT_EXPORTS):
            ids[f"e{i}"] = post(f"e{i}", "export", {"steps": 10, "step_seconds": 0.1}).json()["id"]

        def long_running() -> bool:
            answer = client.get(f"/jobs/{ids['long']}")
            return answer.json()["status"] == "running"

        wait_until(long_running, worker_a, tmp_path / "worker-a.log")
        pending = client.get(f"/jobs/{ids['long']}")
        assert pending.headers["retry-after"] == "1"
        assert client.delete(f"/jobs/{ids['long']}").json() == {
            "id": ids["long"],
            "status": "cancelled",
        }
        assert client.delete(f"/jobs/{ids['long']}").status_code == 409

        # Hundreds of requests: each thumbnail POSTed twice with its key (a client's retry).
        for i in range(THUMBNAILS):
            first = post(f"t{i}", "thumbnail", thumbnail_payload(i))
            again = post(f"t{i}", "thumbnail", thumbnail_payload(i), expect=200)
            assert again.json()["id"] == first.json()["id"]
            ids[f"t{i}"] = first.json()["id"]
        for i in range(FLAKY):
            ids[f"f{i}"] = post(f"f{i}", "flaky", {"fail_times": FAIL_TIMES}).json()["id"]
        for i in range(INVOICES):
            amount = -10 if i % 2 else 10 * i
            ids[f"i{i}"] = post(f"i{i}", "invoice", {"amount": amount}).json()["id"]
        for i in range(5):  # the same key for other work: refused, nothing written
            conflict = post(f"t{i}", "thumbnail", {"width": 1, "height": 1, "box": 1}, expect=409)
            assert conflict.json()["existing_id"] == ids[f"t{i}"]
        assert post("nope", "no-such-kind", {}, expect=422).status_code == 422

        worker_a.send_signal(signal.SIGTERM)  # mid-run: retries pending, thumbnails queued
        assert worker_a.wait(timeout=30) == 0, (tmp_path / "worker-a.log").read_text()
        seen.note(f"SIGTERM to worker A (pid {worker_a.pid}): it exited 0; worker B starts")

    with sa.create_engine(dsn).connect() as conn:  # W4: nothing left held by the stopped worker
        running = conn.execute(sa.select(jobs.c.id).where(jobs.c.state == "running")).all()
    assert running == []

    log_b = tmp_path / "worker-b.log"
    with queuecore_process(*WORKER, "--dsn", dsn, log=log_b) as worker_b:
        # Its SIGTERM handler is in place once it says it started: worker A may have left
        # it nothing to do, and a SIGTERM during its start-up would simply kill it.
        wait_until(lambda: "started:" in log_b.read_text(), worker_b, log_b)
        answers = {}
        for name, job_id in ids.items():
            answer = client.get(f"/jobs/{job_id}", params={"wait": 20})
            answers[name] = answer.json()
            assert answer.json()["status"] in ("done", "dead", "cancelled"), answer.text
            assert "retry-after" not in answer.headers
        worker_b.send_signal(signal.SIGTERM)
        assert worker_b.wait(timeout=30) == 0
        seen.note(f"SIGTERM to worker B (pid {worker_b.pid}): it exited 0")

    for i in range(THUMBNAILS):
        a = answers[f"t{i}"]
        assert (a["status"], a["result"], a["error"]) == ("done", expected_thumbnail(i), None)
    for i in range(FLAKY):
        a = answers[f"f{i}"]
        assert (a["status"], a["attempts"]) == ("done", FAIL_TIMES + 1)
        assert a["result"] == {"succeeded_on_attempt": FAIL_TIMES + 1}
    for i in range(INVOICES):
        a = answers[f"i{i}"]
        if i % 2:
            assert (a["status"], a["attempts"], a["result"]) == ("dead", 1, None)
            assert "amount must not be negative" in a["error"]
        else:
            assert a["result"] == {"invoice": f"INV-{ids[f'i{i}']:06d}", "amount": 10 * i}
    for i in range(SHORT_EXPORTS):
        assert answers[f"e{i}"]["status"] == "done"
        assert answers[f"e{i}"]["result"] == {"rows": 1000}
    assert (answers["long"]["status"], answers["long"]["result"]) == ("cancelled", None)

    # From the database: one job per key, every key accounted for, nothing else written.
    with sa.create_engine(dsn).connect() as conn:
        stored = conn.execute(sa.select(jobs.c.id, jobs.c.dedupe_key, jobs.c.state)).all()
    assert len(stored) == len(ids)
    assert sorted(key for _, key, _ in stored) == sorted(f"http:{name}" for name in ids)
    assert {job_id for job_id, _, _ in stored} == set(ids.values())
    assert not [row for row in stored if row.state not in ("done", "dead", "cancelled")]
    assert seen.requests >= 300

    if os.environ.get("QUEUECORE_EXAMPLE_TRANSCRIPT"):
        seen.save(os.environ["QUEUECORE_EXAMPLE_TRANSCRIPT"])


def test_the_operator_lists_jobs_page_by_page(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`GET /jobs` (R31, R32): filters, each failed attempt, and a link to the next page."""
    from fastapi.testclient import TestClient

    from examples.webapi.app import app

    monkeypatch.setenv("QUEUECORE_DSN", dsn)
    with queuecore.connect(dsn) as queue:
        first = queue.enqueue("flaky", {}, queue="a").id
        second, third = queue.enqueue_many("flaky", [{}, {}], queue="b")
        for _ in range(2):
            [job] = queue.claim("w", queues=["a"])
            queue.fail(job, f"broke on attempt {job.attempts}\ntraceback ...", retry_in=0)
    with TestClient(app) as client:
        page = client.get("/jobs", params={"state": ["queued"], "kind": "flaky", "limit": 2})
        assert page.status_code == 200
        listed = page.json()
        assert [j["id"] for j in listed["jobs"]] == [first, second]
        assert [e["error"] for e in listed["jobs"][0]["errors"]] == [
            "broke on attempt 1",
            "broke on attempt 2",
        ]
        rest = client.get(listed["next"]).json()
        assert [j["id"] for j in rest["jobs"]] == [third] and rest["next"] is None
        assert client.get("/jobs", params={"state": "finished"}).status_code == 422
