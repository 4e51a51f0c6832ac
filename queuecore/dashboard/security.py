"""What keeps the dashboard from being turned against the queue.

- CSRF: every form carries a token kept in the signed session cookie (SameSite=strict);
  a POST without the matching token is refused before its form is even read further.
- Hosts: a request must name the dashboard by one of its own names (a DNS-rebinding page
  reaches its address under the attacker's name), and beyond loopback a token is required.
- Access: with a token set, every request needs it, as HTTP basic auth (any user name,
  the token as password, so a browser can ask for it) or as `Authorization: Bearer`.
  Pages show payloads, which may hold secrets, so the token guards reading too.
- Headers: a Content-Security-Policy that allows only the dashboard's own script and
  style files (no inline script can run, even if escaping were ever missed), no framing
  (a confirmation page cannot be clicked through from another site), no sniffing.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

CSRF_FIELD = "csrf_token"
_SESSION_KEY = "csrf"

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


#: The names a loopback dashboard answers to.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def allowed_hosts(bind: str, extra: Sequence[str] = ()) -> list[str]:
    """The Host headers a dashboard listening on `bind` answers to: loopback's names,
    and beyond loopback the address itself (unless it is every address) and this host's
    names, with `extra` (the operator's own names for it, a proxy's)."""
    names = [*LOOPBACK_NAMES, *extra]
    if not is_loopback(bind):
        if bind not in ("0.0.0.0", "::", ""):
            names.append(f"[{bind}]" if ":" in bind else bind)
        names += [socket.gethostname(), socket.getfqdn()]
    return list(dict.fromkeys(names))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def csrf_token(request: Request) -> str:
    """This browser session's token, made on first use."""
    token = request.session.get(_SESSION_KEY)
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session[_SESSION_KEY] = token
    return token


def csrf_passes(request: Request, form: Mapping[str, Any]) -> bool:
    expected = request.session.get(_SESSION_KEY)
    sent = form.get(CSRF_FIELD)
    if not isinstance(expected, str) or not isinstance(sent, str):
        return False
    return hmac.compare_digest(expected.encode(), sent.encode())


def token_passes(authorization: str | None, token: str) -> bool:
    if not authorization:
        return False
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer":
        sent = credentials.strip()
    elif scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        sent = decoded.partition(":")[2]
    else:
        return False
    return hmac.compare_digest(sent.encode(), token.encode())


class Guard(BaseHTTPMiddleware):
    """The access token (when one is set) and the security headers on every response."""

    def __init__(self, app: Any, token: str | None) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if self.token is not None and not token_passes(
            request.headers.get("authorization"), self.token
        ):
            response: Response = PlainTextResponse(
                "this dashboard needs its token (as the basic-auth password)",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="queuecore"'},
            )
        else:
            response = await call_next(request)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response
