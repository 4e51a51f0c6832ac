"""Alembic is the only way the schema is made or changed; this drives it from code.

queuecore keeps its own version table, so its history can live beside the
application's own alembic history in the same database.

Every `connect()` checks that the database is at the revision this code was written
for. When it is (the common case), that check reads the version table with one plain
query and compares it with `HEADS`, without importing alembic, which was about a
quarter of the start of a worker process; alembic is loaded only to migrate, or to say
what is missing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, Engine, MetaData, column, inspect, select, table
from sqlalchemy.exc import OperationalError

from queuecore.contract import backend_for, installed_backends
from queuecore.core.dsn import scrubbed, secrets_of, shown, to_url
from queuecore.core.options import for_engine
from queuecore.errors import DatabaseUnreachableError, NotMigratedError, SchemaTooNewError
from queuecore.sql.schema import metadata

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE = "queuecore_alembic_version"
#: The revisions SQLite and PostgreSQL share (`migrations/versions`).
DEFAULT_CHAIN = "versions"
#: The newest revision of each of queuecore's chains, as alembic reads it from the files
#: (tests/upgrades/test_migrate_check.py holds the two equal): what a connect compares the
#: database's revision with. A chain not listed (a third-party backend's) is read by alembic.
HEADS = {DEFAULT_CHAIN: "0006", "mariadb": "mariadb_0003"}


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Only queuecore's tables: the application's own tables may share the database.
    Here rather than in the migrations' env.py so that a drift check can use the very same
    filter as the migrations do."""
    if type_ == "table":
        return name in metadata.tables
    table = getattr(obj, "table", None)
    return table is None or table.name in metadata.tables


def alembic_config(engine: Engine | None = None) -> Config:
    """Alembic's view of queuecore's migrations, run on `engine` (the engine is handed to
    migrations/env.py, so no URL is written down); public for tests that step through
    revisions one at a time. Each backend names its chain of revisions (`migrations/`
    `versions/` for SQLite and PostgreSQL, `mariadb/` for MariaDB, whose table is built
    differently from its first revision on)."""
    cfg = _config(migration_chain(engine))
    cfg.attributes["engine"] = engine
    return cfg


def _config(chain: str) -> Config:
    from alembic.config import Config

    root = resources.files("queuecore.migrations")
    cfg = Config()
    cfg.set_main_option("script_location", str(root))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", str(root / chain))
    return cfg


def migration_chain(engine: Engine | None) -> str:
    """The folder of the revisions for `engine`'s backend (the shared chain without one)."""
    if engine is None:
        return DEFAULT_CHAIN
    return backend_for(engine.url).migration_chain


def models(engine: Engine) -> MetaData:
    """The models the migrations of `engine`'s backend build (what a drift check compares
    the database with): `queuecore.sql.schema`'s, or the backend's own `metadata`."""
    return backend_for(engine.url).metadata


@functools.cache
def _scripts(chain: str) -> ScriptDirectory:
    """One chain's revisions, read from their files once per process: a connect that
    finds the database short of `HEADS` reads them, and reading them again each time cost
    a third of a connect."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config(chain))


def scripts(engine: Engine | None) -> ScriptDirectory:
    """The revisions of `engine`'s chain (of the shared chain without one)."""
    return _scripts(migration_chain(engine))


def head_revision(engine: Engine | None = None) -> str:
    """The newest revision of `engine`'s chain (of the shared chain without one)."""
    head = scripts(engine).get_current_head()
    assert head is not None, "queuecore ships at least one migration"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None: it has no queuecore schema), read from the
    version table as alembic writes it: one row, one column."""
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table(VERSION_TABLE):
                return None
            version = table(VERSION_TABLE, column("version_num"))
            return conn.execute(select(version.c.version_num)).scalar()
    except OperationalError as exc:
        # The driver's hint ("Is the server running ...?") is on its own line: keep it, on one.
        dsn = shown(engine.url)
        said = scrubbed(" ".join(str(exc.orig).split()), secrets_of(engine.url))
        said += "" if said.endswith(("?", ".", "!")) else "."
        raise DatabaseUnreachableError(
            f"cannot open the database {dsn}: {said} "
            "Check that the server is running (or the file's folder exists) and the DSN is right."
        ) from exc


def migrate(bind: str | URL | Engine, **options: Any) -> str:
    """Bring the database to the newest schema (alembic upgrade head); returns the revision.
    Takes connect()'s options; those that shape the engine (sqlite_driver, ...) are used."""
    from alembic import command

    with _engine(bind, options) as engine:
        _refuse_newer(engine)
        command.upgrade(alembic_config(engine), "head")
        return head_revision(engine)


def check_schema(bind: str | URL | Engine, **options: Any) -> str:
    """The database's revision when it is the newest this queuecore knows; otherwise
    `NotMigratedError` naming the pending revisions and the command to run. Reads the
    version table only and writes nothing: for deploy scripts (`queuecore migrate
    --check`). A database migrated by a newer queuecore raises `SchemaTooNewError`."""
    with _engine(bind, options) as engine:
        current = _refuse_newer(engine)
        if current is None or current != head_revision(engine):
            raise NotMigratedError(behind(engine, current))
        return current


@contextmanager
def _engine(bind: str | URL | Engine, options: dict[str, Any]) -> Iterator[Engine]:
    """`bind` itself, or an engine the backend shapes from connect()'s options, disposed
    at the end."""
    if isinstance(bind, Engine):
        yield bind
        return
    url = to_url(bind)
    backend = backend_for(url)
    given = for_engine(backend, installed_backends(), options)
    engine = backend.create_engine(url, given.backend, **given.pool)
    try:
        yield engine
    finally:
        engine.dispose()


def _pending(engine: Engine, current: str | None) -> list[str]:
    script = scripts(engine)
    newest_first = script.iterate_revisions("head", current or "base")
    return [rev.revision for rev in reversed(list(newest_first))]


def ensure_schema(engine: Engine, *, migrate: bool) -> None:
    """Check at connect that the schema is the one this code was written for."""
    current = current_revision(engine)
    if current is not None and current == HEADS.get(migration_chain(engine)):
        return  # the common case, without alembic
    _refuse_unknown(engine, current)  # read once above: not again
    if current == head_revision(engine):
        return
    if migrate:
        from alembic import command

        command.upgrade(alembic_config(engine), "head")
        return
    raise NotMigratedError(behind(engine, current))


def behind(engine: Engine, current: str | None) -> str:
    """What a database short of head lacks, and the command that brings it there."""
    dsn = shown(engine.url)
    state = "has no queuecore schema" if current is None else f"is at revision {current}"
    return (
        f"the database {dsn} {state}; this queuecore needs revision {head_revision(engine)} "
        f"(pending: {', '.join(_pending(engine, current))}). "
        f"Run: queuecore migrate --dsn '{dsn}'  (or queuecore.migrate(dsn) from Python)"
    )


def _refuse_newer(engine: Engine) -> str | None:
    """The database's revision, refused when this code does not know it."""
    current = current_revision(engine)
    _refuse_unknown(engine, current)
    return current


def _refuse_unknown(engine: Engine, current: str | None) -> None:
    """`SchemaTooNewError` when the database is at a revision this code does not know."""
    if current is None:
        return
    script = scripts(engine)
    known = {rev.revision for rev in script.walk_revisions()}
    if current not in known:
        raise SchemaTooNewError(
            f"the database is at queuecore schema revision {current}, which this version of "
            f"queuecore does not know (newest known: {head_revision(engine)}); it was migrated "
            "by a newer queuecore. Upgrade queuecore instead of running an older one against it."
        )
