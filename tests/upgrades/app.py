"""An application of its own beside queuecore: its folder as `alembic init` makes it, its
models, and `alembic` run on it as a process, as its developers run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config

#: The application's models: one table and an index of its own.
MODELS = """
import sqlalchemy as sa

metadata = sa.MetaData()
orders = sa.Table(
    "orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("job_id", sa.BigInteger),
    sa.Column("note", sa.String(200), nullable=False),
    sa.Index("ix_orders_job_id", "job_id"),
)
"""

#: The generic template's lines this test changes; a new alembic that words them
#: differently fails here, loudly, rather than testing an env.py without the hooks.
TEMPLATE_METADATA = "target_metadata = None\n"
TEMPLATE_CONFIGURE = "connection=connection, target_metadata=target_metadata\n"
#: The README's three lines: the import and the two hooks.
HOOKS = (
    "connection=connection,\n"
    "            target_metadata=target_metadata,\n"
    "            include_object=queuecore.alembic.include_object,\n"
    "            include_name=queuecore.alembic.include_name,\n"
)


def make_app(folder: Path, dsn: str, *, hooks: bool = True) -> Path:
    """`alembic init` in `folder`, the models as target metadata, `dsn` in alembic.ini,
    and queuecore's hooks in env.py (unless `hooks` is False)."""
    folder.mkdir()
    (folder / "app_models.py").write_text(MODELS)
    ini = folder / "alembic.ini"
    config = Config(str(ini))
    command.init(config, str(folder / "migrations"), template="generic")
    text = ini.read_text()
    ini.write_text(text.replace("driver://user:pass@localhost/dbname", dsn.replace("%", "%%")))
    env = folder / "migrations" / "env.py"
    code = env.read_text()
    assert TEMPLATE_METADATA in code and TEMPLATE_CONFIGURE in code, "alembic's template moved"
    code = code.replace(TEMPLATE_METADATA, "from app_models import metadata as target_metadata\n")
    if hooks:
        code = "import queuecore.alembic\n" + code.replace(TEMPLATE_CONFIGURE, HOOKS)
    env.write_text(code)
    return folder


def alembic(app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`alembic ARGS...` in the application's folder; fails the test on a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def autogenerate(app: Path) -> tuple[str, str]:
    """`alembic revision --autogenerate`: the revision file it wrote, and what it said."""
    done = alembic(app, "revision", "--autogenerate", "-m", "orders")
    [revision] = (app / "migrations" / "versions").glob("*_orders.py")
    return revision.read_text(), done.stdout + done.stderr
