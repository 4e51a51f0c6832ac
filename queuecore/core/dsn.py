"""Reading a DSN the way a new user writes one: the spellings hosting providers hand out are
taken, and the near misses are told what they mean before anything connects."""

from __future__ import annotations

import re

from sqlalchemy import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError

#: The PostgreSQL drivers queuecore's backend runs on (it uses psycopg 3's own API).
POSTGRESQL_DRIVERS = ("postgresql+psycopg", "postgresql")


def to_url(bind: str | URL | Engine) -> URL:
    """The URL of a DSN or an engine, with `postgres://` read as `postgresql://`."""
    if isinstance(bind, Engine):
        return bind.url
    try:
        url = make_url(bind)
    except ArgumentError:
        raise ValueError(
            f"not a database URL: {masked(str(bind))!r} (try sqlite:///jobs.db or "
            "postgresql+psycopg://user@host/db)"
        ) from None  # the cause would repeat the DSN whole
    backend, _, driver = url.drivername.partition("+")
    if backend == "postgres":  # Heroku, Render, Fly and others hand out this scheme
        url = url.set(drivername="postgresql" + (f"+{driver}" if driver else ""))
    check(url)
    return url


def check(url: URL) -> None:
    """Refuse, with what to write instead, a DSN that would go wrong later and obscurely."""
    backend = url.get_backend_name()
    if url.host and "@" in url.host:  # u:p@ss@host: "ss@host" would be tried as the host
        raise ValueError(
            f"{url.drivername}://{url.username}:***@...: the password (or the user name) holds "
            "an '@' that is not percent-encoded, so part of it was read as the host; write it "
            "as %40 (urllib.parse.quote(password, safe='') encodes every such character)"
        )
    if backend == "postgresql" and url.drivername not in POSTGRESQL_DRIVERS:
        raise ValueError(
            f"{shown(url)}: queuecore's PostgreSQL backend runs on psycopg 3 only, not on "
            f"{url.get_driver_name()!r}; write the DSN as postgresql+psycopg://... "
            "(or postgresql://..., which means the same here)"
        )
    if backend == "sqlite" and url.host and not url.database:
        raise ValueError(
            f"sqlite://{url.host} names no file: with two slashes {url.host!r} is read as a "
            f"host, and SQLite has none. A file in the working directory is "
            f"sqlite:///{url.host} (three slashes); an absolute path is "
            f"sqlite:////var/lib/app/{url.host} (four)"
        )


# --- secrets out of messages and logs ---------------------------------------------------

#: Keys whose values are secrets, in a URL's query string or a libpq conninfo string.
SECRET_WORDS = ("password", "passwd", "pwd", "sslpassword", "secret", "token", "api_key", "apikey")
SECRET_KEY = f"(?:{'|'.join(SECRET_WORDS)})"
# A value already hidden is left alone: masking twice must not eat what follows it.
_QUERY_SECRET = re.compile(rf"([?&;]{SECRET_KEY}=)(?!\*\*\*)[^&;#\s]*", re.IGNORECASE)
_CONNINFO_SECRET = re.compile(
    rf"((?<![?&;])\b{SECRET_KEY}\s*=\s*)(?!\*\*\*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE
)
HIDDEN = "***"
_WHOLE_URL = re.compile(r"(\w[\w+.-]*://)(.*)", re.DOTALL)
_QUOTED_URL = re.compile(r"(\w[\w+.-]*://)([^\s'\"]*)")  # a URL in a sentence ends at a space


def shown(url: URL) -> str:
    """A URL for a message or a log line: its password and any secret in its query string
    (`?password=...`, which libpq and the MySQL drivers read too) as ***."""
    return masked(url.render_as_string(hide_password=True))


def masked(text: str) -> str:
    """`text`, a DSN in any spelling or a message that quotes one, with its secrets as ***:
    a URL's password (even one holding an unescaped '@' or '/': everything from the first
    ':' of the user part to the authority's last '@'), `?password=` in a query string, and
    `password=...` in a conninfo string (host=... password=...)."""
    # Most text holds none: the worker's line per job, which this cost 13 µs of 16.
    return _masked(text) if may_hold_secret(text) else text


def _masked(text: str) -> str:
    text = _CONNINFO_SECRET.sub(rf"\g<1>{HIDDEN}", _QUERY_SECRET.sub(rf"\g<1>{HIDDEN}", text))
    if _WHOLE_URL.fullmatch(text):  # a DSN alone: a space may be part of its user name
        return _WHOLE_URL.sub(_hide_userinfo, text)
    return _QUOTED_URL.sub(_hide_userinfo, text)


def may_hold_secret(text: str) -> bool:
    """Whether any of `masked`'s patterns could match: only text with `://` or one of the
    SECRET_WORDS can. Text that is not ASCII is always looked at, since the patterns
    ignore case the Unicode way (a long s, U+017F, matches an "s"), which `str.lower` does not."""
    if not text.isascii() or "://" in text:
        return True
    lowered = text.lower()
    return any(word in lowered for word in SECRET_WORDS)


def _hide_userinfo(match: re.Match[str]) -> str:
    scheme, rest = match.group(1), match.group(2)
    end = rest.find("?") if "?" in rest else len(rest)
    at = rest.rfind("@", 0, end)
    if at < 0:
        return match.group(0)
    user, colon, password = rest[:at].partition(":")
    if not colon or password == HIDDEN:
        return match.group(0)
    return f"{scheme}{user}:{HIDDEN}{rest[at:]}"


def secrets_of(dsn: str | URL | None) -> list[str]:
    """The secrets a DSN holds, to take out of text that may repeat them in part of some
    other shape (a driver's message quoting a host that was half a password)."""
    if dsn is None:
        return []
    text = dsn.render_as_string(hide_password=False) if isinstance(dsn, URL) else dsn
    if "://" not in text:  # a conninfo string
        found = [m.group(2).strip("'") for m in _CONNINFO_SECRET.finditer(text)]
    else:
        found = [m.group(0).partition("=")[2] for m in _QUERY_SECRET.finditer(text)]
        try:
            url = make_url(text)
        except ArgumentError:
            url = None
        if url is not None and url.password:
            found.append(str(url.password))
            if url.host and "@" in url.host:  # the part of the password read as the host
                found.append(url.host.rpartition("@")[0])
    return [secret for secret in found if len(secret) >= 3 and secret != HIDDEN]


def scrubbed(text: str, secrets: list[str]) -> str:
    """`masked(text)`, and each of `secrets` as *** wherever else it appears."""
    text = masked(text)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text
