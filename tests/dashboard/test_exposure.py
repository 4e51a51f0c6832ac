"""The dashboard's exposure: beyond loopback it needs its token, read-only too; it answers
only to its own host names (DNS rebinding); crafted parameters get 400 or 404, never a
500, on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from queuecore.dashboard.app import create_app
from queuecore.dashboard.security import allowed_hosts
from tests.worker.processes import run_queuecore

TOKEN = "a-token-of-some-length"
BEARER = {"Authorization": f"Bearer {TOKEN}"}

CRAFTED = {
    "/jobs/99999999999999999999999": 404,
    "/jobs/9223372036854775808": 404,
    "/jobs?queue=a%00b": 400,
    "/jobs?kind=a%00b": 400,
    "/dead?queue=%00": 400,
    "/jobs?dedupe_key=a%00b": 400,
    "/jobs?id=99999999999999999999999": 400,
    "/jobs?after=inf:1": 400,
    "/jobs?state=done&after=inf:1": 400,
    "/dead?after=-inf:1": 400,
    "/jobs?state=cancelled&after=nan:1": 400,
    "/dead?after=1e999:1": 400,
    "/jobs?state=done&after=1:99999999999999999999999": 400,
    "/jobs?after=1": 400,
    "/jobs?state=nothing": 400,
    "/jobs?dedupe_key=unknown": 404,
}


def statuses(
    app: Any, host: str, paths: list[str], headers: dict[str, str] | None = None
) -> list[int]:
    """What the application answers to GET `paths` naming `host`, in process: an error
    that escapes it is a 500, as a server would answer."""

    async def get_all() -> list[int]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as client:
            return [(await client.get(path, headers=headers)).status_code for path in paths]

    return asyncio.run(get_all())


def test_crafted_parameters_get_400_or_404_never_500(queue):
    queue.enqueue("k", {}, queue="q")
    app = create_app(queue, allowed_hosts=["testserver"])
    assert dict(zip(CRAFTED, statuses(app, "testserver", list(CRAFTED)), strict=True)) == CRAFTED
    assert statuses(app, "testserver", ["/jobs?queue=" + "q" * 300]) == [200]  # no such job


@pytest.mark.parametrize("backend", ["sqlite"])  # the Host check comes before the database
def test_beyond_loopback_only_its_own_names_and_the_token_get_in(queue):
    hosts = allowed_hosts("0.0.0.0", ["queue.example"])
    app = create_app(queue, read_only=True, token=TOKEN, allowed_hosts=hosts)
    assert statuses(app, "evil.test", ["/"], BEARER) == [400]  # a DNS-rebinding page's name
    assert statuses(app, "queue.example", ["/", "/jobs"]) == [401, 401]
    assert statuses(app, "queue.example", ["/", "/jobs"], BEARER) == [200, 200]
    assert "127.0.0.1" in hosts and "evil.test" not in hosts


@pytest.mark.parametrize("backend", ["sqlite"])  # refused before any database is opened
def test_beyond_loopback_it_refuses_to_start_without_a_token_read_only_too(dsn):
    for mode in ([], ["--read-only"]):
        done = run_queuecore("dashboard", "--dsn", dsn, "--host", "0.0.0.0", "--port", "1", *mode)
        assert done.returncode == 2, done
        assert "needs a token" in done.stderr and "--read-only too" in done.stderr
