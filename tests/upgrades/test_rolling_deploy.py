"""R36, expand then contract (ADR 0014): while an upgrade rolls out, the previous release's
processes keep working on the upgraded schema, and today's code meets a schema one
revision behind as the rule says: SQLite's connect migrates it, the servers' connect
refuses with the command to run.

The previous release is taken from git (`old_release.py`); its enqueuing application and
its `queuecore worker` run in processes of their own, started before the upgrade, as the
running fleet of a deploy is; today's `queuecore.migrate` upgrades under them; then the
old application and today's code enqueue more, and the old worker runs everything to done.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

import queuecore
from queuecore.conformance.harness import Harness
from queuecore.migrate import alembic_config, current_revision, head_revision
from tests.upgrades.old_release import Release, candidates
from tests.upgrades.revisions import previous_revision
from tests.worker.processes import reaped

pytestmark = pytest.mark.xdist_group("old-release")  # one venv and export for them all

#: The application's jobs module, as the old worker imports it.
JOBS = '''
def touch(job):
    """Does nothing: the job's done row is the whole proof."""


REGISTRY = {"touch": touch}
'''

#: The old application: says where its queuecore is, then enqueues one job per line it
#: reads, printing each id.
APP = """
import os, sys
import queuecore

queue = queuecore.connect(os.environ["QUEUECORE_DSN"])
print(queuecore.__file__, flush=True)
for line in sys.stdin:
    print(queue.enqueue("touch", {"n": int(line)}).id, flush=True)
queue.close()
"""

#: The old release's `queuecore worker` on those jobs, idle polls short.
OLD_WORKER = ("-m", "queuecore", "worker", "rolling_jobs:REGISTRY", "--poll-interval", "0.1")


@pytest.fixture
def release(
    harness: Harness, empty_dsn: str, old_release: Callable[[str], Release | None]
) -> Release:
    """The release before the head revision of this backend's chain."""
    engine = harness.engine(empty_dsn)
    try:
        script = ScriptDirectory.from_config(alembic_config(engine))
        head = script.get_revision(head_revision(engine))
        previous = previous_revision(engine)
        before = None if previous is None else Path(script.get_revision(previous).path)
        found = candidates(Path(head.path), before)
    finally:
        engine.dispose()
    for commit in found:
        if (release := old_release(commit)) is not None:
            return release
    pytest.fail(f"none of the commits {found} before {head.path} imports queuecore.cli")


@contextmanager
def running(
    release: Release, env: dict[str, str], log: Path, *args: str
) -> Iterator[subprocess.Popen[str]]:
    """The old release's python with `args`, stdin a pipe, stdout read by the test, stderr
    in `log`; killed if the test leaves it running."""
    with open(log, "a") as errors:
        proc = subprocess.Popen(
            [str(release.python), *args],
            env=env,
            cwd=log.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    with reaped(proc):
        yield proc


def said(proc: subprocess.Popen[str], log: Path) -> str:
    """The process's next line of output; the test fails with its log if it ended."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the old release's process ended:\n{log.read_text()}"
    return line.strip()


def enqueue(app: subprocess.Popen[str], log: Path, numbers: range) -> list[int]:
    assert app.stdin is not None
    app.stdin.write("".join(f"{n}\n" for n in numbers))
    app.stdin.flush()
    return [int(said(app, log)) for _ in numbers]


def wait_done(engine: sa.Engine, ids: list[int], worker: subprocess.Popen[str], log: Path) -> None:
    jobs = sa.table("queuecore_jobs", sa.column("id"), sa.column("state"))
    query = sa.select(sa.func.count()).where(jobs.c.id.in_(ids), jobs.c.state == "done")
    deadline = time.monotonic() + 60
    while True:
        with engine.connect() as conn:
            if conn.execute(query).scalar_one() == len(ids):
                return
        assert worker.poll() is None, f"the old worker ended:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"jobs {ids} not all done:\n{log.read_text()}"
        time.sleep(0.05)


def test_r36_the_previous_release_keeps_working_while_today_migrates_under_it(
    harness: Harness, empty_dsn: str, release: Release, tmp_path: Path
) -> None:
    (tmp_path / "rolling_jobs.py").write_text(JOBS)
    (tmp_path / "old_app.py").write_text(APP)
    env, log = release.env(empty_dsn, tmp_path), tmp_path / "old-release.log"
    engine = harness.engine(empty_dsn)
    try:
        head = head_revision(engine)
        migrated = subprocess.run(
            [str(release.python), "-m", "queuecore", "migrate"],
            env=env,
            cwd=tmp_path,  # not today's tree: `-m` puts the working folder first on the path
            capture_output=True,
        )
        assert migrated.returncode == 0, migrated.stderr
        previous = current_revision(engine)
        assert previous == (previous_revision(engine) or head), release.commit

        with (
            running(release, env, log, "old_app.py") as app,
            running(release, env, log, *OLD_WORKER) as worker,
        ):
            assert said(app, log).startswith(str(release.site)), "not the old release's code"
            # More enqueues than psycopg's prepare_threshold (5): the old statements are
            # prepared on the server before the schema changes under them.
            before = enqueue(app, log, range(6))
            wait_done(engine, before, worker, log)

            today_meets_the_schema_behind(harness, empty_dsn, previous, head)
            assert queuecore.migrate(empty_dsn) == head

            after = enqueue(app, log, range(6, 9))
            with queuecore.connect(empty_dsn) as today:  # today's rows, the old worker's work
                after.append(today.enqueue("touch", {"n": 9}).id)
            wait_done(engine, after, worker, log)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0, log.read_text()
            assert app.stdin is not None
            app.stdin.close()
            assert app.wait(timeout=60) == 0, log.read_text()
    finally:
        engine.dispose()


def today_meets_the_schema_behind(
    harness: Harness, dsn: str, previous: str | None, head: str
) -> None:
    """What the rule says today's code does with the previous revision's schema."""
    if previous == head or "migrates_on_connect" in harness.capabilities:
        with queuecore.connect(dsn) as queue:
            assert queue.stats()["queued"] == 0
        return
    with pytest.raises(queuecore.NotMigratedError) as refused:
        queuecore.connect(dsn)
    assert f"pending: {head})" in str(refused.value)
    assert "Run: queuecore migrate" in str(refused.value)
