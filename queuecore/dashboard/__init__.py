"""`queuecore dashboard`: a web UI over one queue (the `dashboard` extra).

`create_app(dsn_or_queue)` is the ASGI application to mount in an application of your
own (`app.mount("/queue", create_app(dsn))` in FastAPI or Starlette): every link and
redirect starts with the prefix it is mounted under. This package's own import needs
nothing beyond the core, so the command line loads without the extra."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import URL
    from starlette.applications import Starlette


def create_app(dsn_or_queue: str | URL | Any, *, read_only: bool = False) -> Starlette:
    """The dashboard over a queue (anything `queuecore.connect()` returns) or a DSN, to
    mount in your application. The host application's own authentication and host checks
    apply to it: it takes requests under any host name, and keeps its own CSRF check on
    every action. A queue opened from a DSN stays open for the life of the process."""
    from sqlalchemy import URL

    from queuecore.connect import connect
    from queuecore.dashboard import app

    queue = connect(dsn_or_queue) if isinstance(dsn_or_queue, (str, URL)) else dsn_or_queue
    return app.create_app(queue, read_only=read_only, allowed_hosts=["*"])
