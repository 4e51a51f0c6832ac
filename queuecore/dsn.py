"""Reading a DSN the way a new user writes one: the spellings hosting providers hand out are
taken, and the near misses are told what they mean before anything connects."""

from __future__ import annotations

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
    except ArgumentError as exc:
        raise ValueError(
            f"not a database URL: {bind!r} (try sqlite:///jobs.db or "
            "postgresql+psycopg://user@host/db)"
        ) from exc
    backend, _, driver = url.drivername.partition("+")
    if backend == "postgres":  # Heroku, Render, Fly and others hand out this scheme
        url = url.set(drivername="postgresql" + (f"+{driver}" if driver else ""))
    check(url)
    return url


def check(url: URL) -> None:
    """Refuse, with what to write instead, a DSN that would go wrong later and obscurely."""
    backend = url.get_backend_name()
    if backend == "postgresql" and url.drivername not in POSTGRESQL_DRIVERS:
        shown = url.render_as_string(hide_password=True)
        raise ValueError(
            f"{shown}: queuecore's PostgreSQL backend runs on psycopg 3 only, not on "
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
