"""The README's Python blocks run as written, twice (a reader runs an example again).

A block whose first line names a file (`# myapp/jobs.py`) is written there instead, as a
reader would save it; the others run in a fresh namespace from that folder, each run in
a fresh process's worth of modules. Test files among them then run under pytest. The
README's placeholder PostgreSQL DSN is pointed at a scratch database of the test server.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FILE_NAME = re.compile(r"# ([\w/]+\.py)\n")
PLACEHOLDER_DSN = "postgresql+psycopg://app@db.internal/app"


def blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in BLOCK.finditer(text)]


def test_the_readme_has_python_blocks_and_files() -> None:
    found = blocks()
    assert len(found) >= 4
    assert {"myapp/jobs.py", "tests/test_jobs.py"} <= {
        m.group(1) for _, code in found if (m := FILE_NAME.match(code))
    }


def test_readme_python_blocks_name_nothing_undefined(tmp_path) -> None:
    """What running cannot catch: a name used only inside a function body (the Workers
    block once called a `mark_sent` it never defined)."""
    for line, code in blocks():
        (tmp_path / f"block_at_line_{line}.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821,F811", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def forget_modules(folder: Path) -> None:
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", "") or "").startswith(str(folder)):
            del sys.modules[name]


def test_readme_python_blocks_run_twice(tmp_path, monkeypatch, scratch_databases) -> None:
    dsn = scratch_databases.create()
    runnable = []
    for line, code in blocks():
        named = FILE_NAME.match(code)
        if named:
            path = tmp_path / named.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code)
        else:
            runnable.append((line, code.replace(PLACEHOLDER_DSN, dsn)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for run in (1, 2):
        forget_modules(tmp_path)
        for line, code in runnable:
            try:
                exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "readme"})
            except Exception as exc:
                pytest.fail(f"run {run}: the block at README.md line {line} raised {exc!r}")
    forget_modules(tmp_path)

    tests = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("tests/test_*.py"))
    assert tests
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
