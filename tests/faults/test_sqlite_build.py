"""The WAL-reset check: which SQLite builds are affected, the warning at connect, and
the bundled-SQLite driver that makes it go away."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from queuecore.backends.sqlite import DRIVER_ENV, has_wal_reset_fix


@pytest.mark.parametrize(
    ("version", "fixed"),
    [
        ((3, 40, 1), False),
        ((3, 44, 5), False),
        ((3, 44, 6), True),
        ((3, 44, 9), True),
        ((3, 45, 0), False),
        ((3, 46, 1), False),
        ((3, 50, 6), False),
        ((3, 50, 7), True),
        ((3, 51, 0), False),
        ((3, 51, 2), False),
        ((3, 51, 3), True),
        ((3, 52, 0), True),
        ((4, 0, 0), True),
    ],
)
def test_wal_reset_fix_by_version(version, fixed):
    assert has_wal_reset_fix(version) is fixed


# Opens two queues in a fresh interpreter (the warning is once per process) and reports
# what it was warned about and which SQLite the queue really runs on. argv[3] "hide"
# makes pysqlite3 unimportable, as on a machine without the extra.
PROBE = """
import json, sys, warnings
if sys.argv[3] == "hide":
    sys.modules["pysqlite3"] = None
import queuecore
options = json.loads(sys.argv[2])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        q = queuecore.connect(sys.argv[1], **options)
        with q.engine.connect() as conn:
            version = conn.exec_driver_sql("select sqlite_version()").scalar()
        module = q.engine.dialect.loaded_dbapi.__name__
        q.close()
build = [str(w.message) for w in caught if w.category is queuecore.SQLiteBuildWarning]
print(json.dumps({"warnings": build, "version": version, "module": module}))
"""


def probe(
    tmp_path: Path, *, hide_pysqlite3: bool = False, env: dict | None = None, **options: str
) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            f"sqlite:///{tmp_path / 'jobs.db'}",
            json.dumps(options),
            "hide" if hide_pysqlite3 else "keep",
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    ).stdout
    return json.loads(out)


@pytest.fixture(autouse=True)
def no_driver_from_the_shell(monkeypatch):
    monkeypatch.delenv(DRIVER_ENV, raising=False)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


STDLIB_FIXED = has_wal_reset_fix(sqlite3.sqlite_version_info)


def test_pysqlite3_is_used_without_being_told_and_nothing_warns(tmp_path):
    seen = probe(tmp_path)
    assert seen["module"] == ("sqlite3.dbapi2" if STDLIB_FIXED else "pysqlite3.dbapi2")
    assert has_wal_reset_fix(version_tuple(seen["version"]))
    assert seen["warnings"] == []


@pytest.mark.skipif(STDLIB_FIXED, reason="this Python's own SQLite has the fix: nothing to warn")
def test_without_a_fixed_build_one_warning_names_the_module_and_the_fix(tmp_path):
    seen = probe(tmp_path, hide_pysqlite3=True)
    assert seen["module"] == "sqlite3.dbapi2"
    [warning] = seen["warnings"]  # once per process, though two queues were opened
    assert warning.startswith(f"SQLite {sqlite3.sqlite_version} from the 'sqlite3' module (")
    assert sqlite3.__file__ in warning
    assert "pip install 'queuecore[pysqlite3]'" in warning
    assert "queuecore then uses it by itself" in warning
    assert warning.endswith(f"To keep this one and silence this warning: {DRIVER_ENV}=sqlite3.")


@pytest.mark.skipif(STDLIB_FIXED, reason="this Python's own SQLite has the fix: nothing to warn")
def test_the_environment_variable_chooses_the_driver_and_silences_the_warning(tmp_path):
    seen = probe(tmp_path, hide_pysqlite3=True, env={DRIVER_ENV: "sqlite3"})
    assert (seen["module"], seen["warnings"]) == ("sqlite3.dbapi2", [])
    seen = probe(tmp_path, env={DRIVER_ENV: "sqlite3"})  # even with pysqlite3 there
    assert (seen["module"], seen["warnings"]) == ("sqlite3.dbapi2", [])


@pytest.mark.skipif(STDLIB_FIXED, reason="this Python's own SQLite has the fix: nothing to warn")
def test_the_standard_warnings_filter_silences_it(tmp_path):
    # A package that shadows pysqlite3 and fails to import: a machine without the extra.
    (tmp_path / "shadow" / "pysqlite3").mkdir(parents=True)
    (tmp_path / "shadow" / "pysqlite3" / "__init__.py").write_text("raise ImportError('gone')")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow")}
    command = [
        sys.executable,
        "-m",
        "queuecore",
        "stats",
        "--dsn",
        f"sqlite:///{tmp_path / 'j.db'}",
    ]
    warned = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    assert "WAL-reset bug" in warned.stderr  # the shadow works: without a filter, it warns
    # -W and PYTHONWARNINGS read before queuecore is imported, so by the message's start.
    env["PYTHONWARNINGS"] = "ignore:SQLite"
    silenced = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    assert silenced.stderr == ""
    # In code, by its category.
    code = (
        "import warnings, sys, queuecore; "
        "warnings.filterwarnings('ignore', category=queuecore.SQLiteBuildWarning); "
        "from queuecore.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    del env["PYTHONWARNINGS"]
    filtered = subprocess.run(
        [sys.executable, "-c", code, *command[3:]], capture_output=True, text=True, env=env
    )
    assert (filtered.returncode, filtered.stderr) == (0, "")


def test_no_command_warns_after_the_readmes_install(tmp_path):
    """The README installs the pysqlite3 extra: then no SQLite command says a word of it."""
    dsn = f"sqlite:///{tmp_path / 'jobs.db'}"
    for args in (["migrate"], ["stats"], ["dead", "list"], ["purge", "--older-than", "1"]):
        result = subprocess.run(
            [sys.executable, "-m", "queuecore", *args, "--dsn", dsn],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr == "", result.stderr


def test_a_chosen_driver_is_used_and_not_second_guessed(tmp_path):
    seen = probe(tmp_path, sqlite_driver="sqlite3")
    assert (seen["module"], seen["warnings"]) == ("sqlite3.dbapi2", [])


def test_unknown_sqlite_driver_is_a_clear_error(tmp_path):
    import queuecore

    with pytest.raises(ModuleNotFoundError, match="sqlite_driver='no_such_driver'"):
        queuecore.connect(f"sqlite:///{tmp_path / 'jobs.db'}", sqlite_driver="no_such_driver")
    assert not (tmp_path / "jobs.db").exists()
