"""The Python blocks of the README and of every documentation page (docs/) run as
written, twice (a reader runs an example again); the quick start's `queuecore worker`
line then runs the job it enqueued.

A block whose first line names a file (`# myapp/jobs.py`) is written there instead, as a
reader would save it; the others run in a fresh namespace from that folder, each run in
a fresh process's worth of modules. Test files among them then run under pytest. The
placeholder PostgreSQL DSN is pointed at a scratch database of the test server.

Pages are run in groups, each group in a folder of its own: the guides build on each
other's files (`myapp/jobs.py`), in the order of `GUIDES`, as the long README they were
moved from did.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SHELL = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
FILE_NAME = re.compile(r"# ([\w/]+\.py)\n")
PLACEHOLDER_DSN = "postgresql+psycopg://app@db.internal/app"
#: The guides whose blocks share one folder, in the order their blocks run.
GUIDES = (
    "explanation/semantics.md",
    "reference/api.md",
    "reference/options.md",
    "how-to/workers.md",
    "how-to/time-limits.md",
    "how-to/periodic.md",
    "how-to/testing.md",
    "tutorial.md",
    "reference/cli.md",
    "how-to/operating.md",
    "how-to/many-hosts.md",
    "how-to/backends.md",
    "explanation/benchmarks.md",
    "how-to/contributing.md",
)
#: Each a folder of its own: a name -> its pages.
GROUPS = {
    "README": (ROOT / "README.md",),
    "docs home": (DOCS / "index.md",),
    "guides": tuple(DOCS / page for page in GUIDES),
}


def blocks(page: Path) -> list[tuple[str, str]]:
    """(where, code) of each Python block of a page; where: `page:line`."""
    text = page.read_text()
    name = page.relative_to(ROOT)
    return [
        (f"{name}:{text.count(chr(10), 0, m.start()) + 2}", m.group(1))
        for m in BLOCK.finditer(text)
    ]


def test_every_page_with_python_blocks_is_run():
    """A new page's blocks must join a group, or they would go unrun."""
    grouped = {page for pages in GROUPS.values() for page in pages}
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    assert [str(p.relative_to(ROOT)) for p in pages if blocks(p) and p not in grouped] == []
    assert all(page.exists() for page in grouped)


def test_the_guides_have_python_blocks_and_files() -> None:
    found = [code for page in GROUPS["guides"] for _, code in blocks(page)]
    assert len(found) >= 4
    assert {"myapp/jobs.py", "tests/test_jobs.py"} <= {
        m.group(1) for code in found if (m := FILE_NAME.match(code))
    }


@pytest.mark.parametrize("group", GROUPS)
def test_python_blocks_name_nothing_undefined(tmp_path, group) -> None:
    """What running cannot catch: a name used only inside a function body (the Workers
    block once called a `mark_sent` it never defined)."""
    for page in GROUPS[group]:
        for where, code in blocks(page):
            stem = re.sub(r"\W", "_", where)
            (tmp_path / f"{stem}.py").write_text(code)
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


@pytest.mark.parametrize("group", GROUPS)
def test_python_blocks_run_twice(tmp_path, monkeypatch, scratch_databases, group) -> None:
    dsn = scratch_databases.create()
    runnable = []
    for page in GROUPS[group]:
        for where, code in blocks(page):
            named = FILE_NAME.match(code)
            if named:
                path = tmp_path / named.group(1)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(code)
            else:
                runnable.append((where, code.replace(PLACEHOLDER_DSN, dsn)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for run in (1, 2):
        forget_modules(tmp_path)
        for where, code in runnable:
            try:
                exec(compile(code, where, "exec"), {"__name__": "docs"})
            except Exception as exc:
                pytest.fail(f"run {run}: the block at {where} raised {exc!r}")
    forget_modules(tmp_path)

    tests = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("tests/test_*.py"))
    if group == "guides":
        assert tests
    if tests:
        done = python_in(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
        assert done.returncode == 0, done.stdout + done.stderr
    worker_lines = [
        line
        for page in GROUPS[group]
        for m in SHELL.finditer(page.read_text())
        for line in m.group(1).splitlines()
        if line.startswith("queuecore worker ")
    ]
    if group != "guides":  # the quick starts: their first worker runs what they enqueued
        assert worker_lines
        run_quick_start_worker(tmp_path, worker_lines[0])


def python_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This Python in `folder`, seeing the modules a reader saved there, as a reader's
    shell would run it."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=folder,
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def run_quick_start_worker(folder: Path, line: str) -> None:
    """The quick start's `queuecore worker` line as written, told to exit once idle."""
    import queuecore

    words = shlex.split(line)[1:]
    done = python_in(folder, "-m", "queuecore", *words, "--exit-when-idle", "1")
    assert done.returncode == 0, done.stderr
    dsn = words[words.index("--dsn") + 1]
    with queuecore.connect(dsn.replace("sqlite:///", f"sqlite:///{folder}/")) as queue:
        jobs = queue.list_jobs()
    assert len(jobs) == 2 and {job.state for job in jobs} == {"done"}, jobs  # run twice
