"""Alembic environment for queuecore's own schema, on either dialect.

It is driven by `queuecore.migrate()`, which hands over an engine set up by the backend
(so SQLite migrations take the write lock like every other write).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from queuecore.contract import backend_for
from queuecore.migrate import VERSION_TABLE, include_object
from queuecore.sql.schema import metadata


def run_migrations_online() -> None:
    engine = context.config.attributes.get("engine")
    owned = engine is None
    if owned:
        engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
    try:
        # One transaction for the whole upgrade, begun before alembic sees the connection:
        # alembic takes SQLite for a database without transactional DDL and would commit
        # after each revision, and a second process racing on a new file then read the
        # version between two of them and ran a revision again. SQLite's DDL is
        # transactional, and this begin takes the write lock (BEGIN IMMEDIATE) for it all.
        # The backend's migration lock is held, on a connection of its own, from before
        # that transaction until after it ended: the next process to get it sees the
        # version this one wrote.
        with (
            backend_for(engine.url).migrating(engine),
            engine.connect() as connection,
            connection.begin(),
        ):
            context.configure(
                connection=connection,
                target_metadata=metadata,
                version_table=VERSION_TABLE,
                include_object=include_object,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
            )
            context.run_migrations()
    finally:
        if owned:
            engine.dispose()


if context.is_offline_mode():
    raise SystemExit("queuecore migrations run online only: use `queuecore migrate --dsn DSN`")
run_migrations_online()
