"""The core install (`pip install queuecore`, or the README's first command with the
pysqlite3 extra) has no greenlet: `import queuecore`, its command line and a sync queue
must work without the async extra, which alone brings SQLAlchemy's asyncio extension."""

from __future__ import annotations

import subprocess
import sys

from queuecore import migrate

WITHOUT_GREENLET = """
import sys
sys.modules["greenlet"] = None  # an import of it now fails, as where it is not installed
import queuecore, queuecore.cli.main
with queuecore.connect(sys.argv[1]) as queue:
    assert queue.enqueue("k", {}).created
print("ok")
"""


def test_import_and_a_sync_queue_need_no_greenlet(tmp_path) -> None:
    dsn = f"sqlite:///{tmp_path / 'jobs.db'}"
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_GREENLET, dsn], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


CONNECT_WITHOUT_ALEMBIC = """
import sys
import queuecore
with queuecore.connect(sys.argv[1]) as queue:
    queue.enqueue("k", {})
print("alembic" in sys.modules)
"""


def test_a_connect_to_a_database_at_head_does_not_load_alembic(tmp_path) -> None:
    """Every process that opens a queue checks its schema; at head the check is one query
    against `migrate.HEADS`, and alembic (about a quarter of a worker's start) is left
    unloaded. Migrated here first: a fresh SQLite file is migrated by alembic at connect."""
    dsn = f"sqlite:///{tmp_path / 'jobs.db'}"
    migrate(dsn)
    done = subprocess.run(
        [sys.executable, "-c", CONNECT_WITHOUT_ALEMBIC, dsn],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
