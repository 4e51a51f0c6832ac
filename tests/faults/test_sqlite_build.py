"""The WAL-reset check: which SQLite builds are affected, the warning at connect, and
the bundled-SQLite driver that makes it go away."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from queuecore.backends.sqlite import has_wal_reset_fix


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
# what it was warned about and which SQLite the queue really runs on.
PROBE = """
import json, sys, warnings
import queuecore
options = json.loads(sys.argv[2])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        q = queuecore.connect(sys.argv[1], **options)
        with q.engine.connect() as conn:
            version = conn.exec_driver_sql("select sqlite_version()").scalar()
        q.close()
build = [str(w.message) for w in caught if w.category is queuecore.SQLiteBuildWarning]
print(json.dumps({"warnings": build, "version": version}))
"""


def probe(tmp_path: Path, **options: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, f"sqlite:///{tmp_path / 'jobs.db'}", json.dumps(options)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_default_driver_warns_once_exactly_when_its_sqlite_is_affected(tmp_path):
    seen = probe(tmp_path)
    expected = 0 if has_wal_reset_fix(version_tuple(seen["version"])) else 1
    assert len(seen["warnings"]) == expected
    if expected:
        assert seen["version"] in seen["warnings"][0]
        assert "sqlite_driver='pysqlite3'" in seen["warnings"][0]


def test_bundled_sqlite_driver_runs_a_fixed_build_and_does_not_warn(tmp_path):
    seen = probe(tmp_path, sqlite_driver="pysqlite3")
    assert has_wal_reset_fix(version_tuple(seen["version"]))
    assert seen["warnings"] == []


def test_unknown_sqlite_driver_is_a_clear_error(tmp_path):
    import queuecore

    with pytest.raises(ModuleNotFoundError, match="sqlite_driver='no_such_driver'"):
        queuecore.connect(f"sqlite:///{tmp_path / 'jobs.db'}", sqlite_driver="no_such_driver")
    assert not (tmp_path / "jobs.db").exists()
