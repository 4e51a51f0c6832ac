"""`queuecore dashboard`'s safety checks, through the real command and real HTTP."""

from __future__ import annotations

import base64

import pytest

from queuecore.dashboard.security import is_loopback, token_passes
from tests.dashboard.browser import dashboard, get

TOKEN = "a-token-of-some-length"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.parametrize("backend", ["sqlite"])
def test_with_a_token_every_request_needs_it(dsn, tmp_path):
    with dashboard(dsn, tmp_path / "dashboard.log", "--token", TOKEN) as base:
        assert get(base + "/") == 401
        assert get(base + "/", basic("anyone", "wrong")) == 401
        assert get(base + "/", basic("anyone", TOKEN)) == 200
        assert get(base + "/dead", {"Authorization": f"Bearer {TOKEN}"}) == 200


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_request_naming_another_host_is_refused_on_loopback(dsn, tmp_path):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: refused."""
    with dashboard(dsn, tmp_path / "dashboard.log") as base:
        assert get(base + "/", {"Host": "attacker.example"}) == 400
        assert get(base + "/") == 200


def test_loopback_addresses():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")


def test_token_schemes():
    assert token_passes(basic("x", TOKEN)["Authorization"], TOKEN)
    assert token_passes(f"Bearer {TOKEN}", TOKEN)
    assert not token_passes(None, TOKEN)
    assert not token_passes("Basic !!!", TOKEN)
    assert not token_passes(f"Token {TOKEN}", TOKEN)
