"""`queuecore.sqlite_engine`: an application's own SQLite engine whose transactions can
enqueue, whether or not the pysqlite3 extra is installed (issue 31). SQLite only: the
two-libraries problem it solves exists on no other backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import sqlalchemy as sa

import queuecore
from tests.worker.processes import queuecore_env

#: The everyday code of an app with its own engine: its row and its job commit together,
#: or neither does.
APP = textwrap.dedent(
    """
    import sqlalchemy as sa
    import queuecore

    def run(dsn):
        engine = queuecore.sqlite_engine(dsn)
        queuecore.migrate(dsn)
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE orders (id INTEGER PRIMARY KEY)"))
        with queuecore.connect(dsn) as queue:
            with engine.begin() as conn:
                conn.execute(sa.text("INSERT INTO orders (id) VALUES (1)"))
                kept = queue.enqueue("send_receipt", {"order": 1}, conn=conn).id
            try:
                with engine.begin() as conn:
                    conn.execute(sa.text("INSERT INTO orders (id) VALUES (2)"))
                    dropped = queue.enqueue("send_receipt", {"order": 2}, conn=conn).id
                    raise RuntimeError("the request failed")
            except RuntimeError:
                pass
            with engine.connect() as conn:
                orders = conn.execute(sa.text("SELECT id FROM orders")).scalars().all()
            library = engine.dialect.loaded_dbapi.__name__
            return library, orders, queue.get(kept).state, queue.get(dropped)
    """
)


@pytest.fixture(autouse=True)
def the_default_driver(monkeypatch):
    """queuecore's own choice of library, as an app gets it: the suite pins the stdlib's
    (tests/conftest.py), which is not what a user with the extra installed runs."""
    monkeypatch.delenv("QUEUECORE_SQLITE_DRIVER", raising=False)


def run_app(dsn: str) -> tuple[str, list[int], str, object]:
    namespace: dict[str, object] = {}
    exec(APP, namespace)
    return namespace["run"](dsn)  # type: ignore[operator,no-any-return]


def test_with_pysqlite3_installed_the_apps_transactions_enqueue(tmp_path):
    pytest.importorskip("pysqlite3", reason="the dev extra installs pysqlite3")
    dsn = f"sqlite:///{tmp_path / 'app.db'}"
    library, orders, state, dropped = run_app(dsn)
    assert library == "pysqlite3.dbapi2"  # the queue's library, not the stdlib's
    assert (orders, state, dropped) == ([1], "queued", None)


def test_with_pysqlite3_installed_a_plain_create_engine_is_still_refused(tmp_path):
    """What sqlite_engine is for: the refusal it avoids, which names it as the fix."""
    pytest.importorskip("pysqlite3", reason="the dev extra installs pysqlite3")
    dsn = f"sqlite:///{tmp_path / 'app.db'}"
    app = sa.create_engine(dsn)
    refused = pytest.raises(ValueError, match=r"queuecore\.sqlite_engine\(url\)")
    with queuecore.connect(dsn) as queue, refused, app.begin() as conn:
        queue.enqueue("a", {}, conn=conn)
    app.dispose()


def test_without_pysqlite3_the_same_code_runs_on_the_stdlib(tmp_path):
    """A process in which pysqlite3 cannot be imported, as on an install without the extra."""
    script = (
        "import sys; sys.modules['pysqlite3'] = None\n"  # import pysqlite3 -> ImportError
        "import warnings; warnings.simplefilter('ignore')\n"  # an old stdlib SQLite warns
        f"{APP}\n"
        "print(run(sys.argv[1]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, f"sqlite:///{tmp_path / 'app.db'}"],
        env={k: v for k, v in queuecore_env().items() if k != "QUEUECORE_SQLITE_DRIVER"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "('sqlite3.dbapi2', [1], 'queued', None)"


def test_sqlite_engine_refuses_another_database(tmp_path):
    with pytest.raises(ValueError, match="for SQLite URLs"):
        queuecore.sqlite_engine("postgresql+psycopg://app@db.internal/app")
    with pytest.raises(ModuleNotFoundError, match="not installed"):
        queuecore.sqlite_engine(f"sqlite:///{tmp_path / 'a.db'}", sqlite_driver="nosuchlib")
