"""The swap, end to end, on real databases and real processes: an application on an
SQLite file with jobs in every state, its worker stopped by SIGTERM mid-job, `queuecore
copy` to a new PostgreSQL database (interrupted once, resumed, run again), workers on
PostgreSQL finishing the work, and the copy back to SQLite."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.sql.schema import jobs
from tests.swap.helpers import rows
from tests.worker.processes import (
    REPO,
    queuecore_env,
    queuecore_process,
    run_queuecore,
    wait_until,
)

WORKER = (
    "worker",
    "tests.swap.handlers:REGISTRY",
    "--lease-seconds",
    "2",
    "--grace-seconds",
    "0.3",
    "--concurrency",
    "2",
    "--poll-interval",
    "0.2",
    "--backoff-base",
    "0.1",
    "--backoff-cap",
    "0.5",
)
FILLER = 1500  # finished jobs, so that a copy in batches of 2 runs long enough to kill


def app(dsn: str, *args: str) -> Any:
    """One run of the application script, which knows nothing but the DSN it is given."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.swap.app", *args],
        cwd=REPO,
        env={**queuecore_env(), "QUEUECORE_DSN": dsn},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def count(dsn: str) -> int:
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one()
    finally:
        engine.dispose()


def runs(log: Path) -> dict[int, list[tuple[str, int, float]]]:
    """Per job id: its (event, attempt, time) lines from the handlers' log."""
    found: dict[int, list[tuple[str, int, float]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        event, job_id, attempt, _pid, at = line.split()
        found[int(job_id)].append((event, int(attempt), float(at)))
    return found


def stats(dsn: str) -> dict[str, int]:
    """Polled often: read in this process rather than through a new one each time."""
    with queuecore.connect(dsn) as queue:
        counts = queue.stats()
    return {k: counts[k] for k in ("queued", "running", "dead")}


@pytest.mark.slow
def test_the_swap_from_sqlite_to_postgresql_and_back(tmp_path, monkeypatch, scratch_databases):
    run_log = tmp_path / "runs.log"
    monkeypatch.setenv("SWAP_RUN_LOG", str(run_log))
    sqlite = f"sqlite:///{tmp_path / 'app.db'}"
    postgresql = scratch_databases.create()
    keyed: dict[str, tuple[int, dict]] = {}  # dedupe key -> (id, job as enqueued)

    def enqueue(dsn: str, *specs: dict) -> list[int]:
        made = app(dsn, "enqueue", json.dumps(specs))
        assert all(m["created"] for m in made)
        keyed.update({s["key"]: (m["id"], s) for s, m in zip(specs, made, strict=True)})
        return [m["id"] for m in made]

    with queuecore.connect(sqlite) as queue:  # the file's history: many finished jobs
        queue.enqueue_many("work", [{"old": n} for n in range(FILLER)], queue="filler")
        while claimed := queue.claim("archiver", limit=500, queues=["filler"]):
            assert all(queue.complete_many(claimed))

    # The application on SQLite; a worker runs a slow job, the rest, and the poison.
    [slow] = enqueue(sqlite, {"kind": "work", "payload": {"seconds": 5}, "key": "slow"})
    enqueue(sqlite, *({"kind": "work", "payload": {"n": i}, "key": f"work-{i}"} for i in range(6)))
    dead = enqueue(
        sqlite, *({"kind": "poison", "payload": {"n": i}, "key": f"poison-{i}"} for i in range(2))
    )
    assert run_queuecore("migrate", "--dsn", postgresql).returncode == 0
    # Long enough to meet the copy's refusal on a loaded machine: at 10 s, a copy that
    # took that long to start (load 40, CI of eb88339) found the lease already ended.
    leased = (*WORKER, "--lease-seconds", "20")
    with queuecore_process(*leased, "--dsn", sqlite, log=tmp_path / "sqlite-worker.log") as proc:
        wait_until(
            lambda: stats(sqlite) == {"queued": 0, "running": 1, "dead": 2},
            proc,
            tmp_path / "sqlite-worker.log",
        )
        proc.send_signal(signal.SIGTERM)  # the playbook's first step
        assert proc.wait(timeout=30) == 0
    stopped_at = time.time()
    refused = run_queuecore("copy", "--from", sqlite, "--to", postgresql)
    assert refused.returncode == 1
    assert "running on the source under leases that end within" in refused.stderr
    assert count(postgresql) == 0
    assert app(sqlite, "status", str(slow))[0]["state"] == "running"  # cut off, lease live

    # Workers are stopped; the application goes on enqueueing.
    later = enqueue(
        sqlite,
        *({"kind": "work", "payload": {"later": i}, "key": f"later-{i}"} for i in range(3)),
        {"kind": "work", "payload": {"delayed": True}, "key": "delayed", "delay": 3},
    )
    total = count(sqlite)

    with queuecore.connect(sqlite) as queue:  # the cut-off job's lease ends by itself
        lease_end = queue.get(slow).visible_at.timestamp()
    time.sleep(max(0.0, lease_end - time.time()) + 0.1)

    # A copy killed halfway, resumed, then run again: each job once.
    copy = ("copy", "--from", sqlite, "--to", postgresql)
    with queuecore_process(*copy, "--batch", "2", log=tmp_path / "copy.log") as proc:
        wait_until(lambda: count(postgresql) >= 200, proc, tmp_path / "copy.log", timeout=120)
        proc.kill()
        proc.wait()
    partial = count(postgresql)
    assert 200 <= partial < total
    resumed = run_queuecore(*copy)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(
        f"copied {total - partial} job(s) ({partial} already on the target)"
    )
    again = run_queuecore(*copy)
    assert again.stdout.startswith(f"copied 0 job(s) ({total} already on the target)")
    assert rows(postgresql) == rows(sqlite)

    # The application changes its DSN: every id is the same job, no key makes a new one.
    ids = [str(job_id) for job_id, _ in keyed.values()]
    assert app(postgresql, "status", *ids) == app(sqlite, "status", *ids)
    retried = app(postgresql, "enqueue", json.dumps([spec for _, spec in keyed.values()]))
    assert retried == [{"id": job_id, "created": False} for job_id, _ in keyed.values()]
    [new] = app(postgresql, "enqueue", json.dumps([{"kind": "work", "payload": {}}]))
    new_id = new["id"]
    assert new_id > max(rows(sqlite))

    # Workers on PostgreSQL finish the work.
    logs = [tmp_path / f"pg-worker-{i}.log" for i in range(2)]
    with (
        queuecore_process(*WORKER, "--dsn", postgresql, "--exit-when-idle", "4", log=logs[0]) as a,
        queuecore_process(*WORKER, "--dsn", postgresql, "--exit-when-idle", "4", log=logs[1]) as b,
    ):
        assert a.wait(timeout=120) == 0 and b.wait(timeout=120) == 0
    assert stats(postgresql) == {"queued": 0, "running": 0, "dead": 2}
    finished = rows(postgresql)
    for key, (job_id, _) in keyed.items():
        assert finished[job_id]["state"] == ("dead" if job_id in dead else "done"), key
    assert finished[new_id]["state"] == "done"
    assert len(finished) == total + 1  # nothing lost, nothing made twice

    # Nothing ran twice: one end per job; the cut-off job ran again only after its worker
    # had exited, on its next attempt.
    seen = runs(run_log)
    for job_id, event_lines in seen.items():
        ends = [e for e in event_lines if e[0] == "end"]
        assert len(ends) == (0 if job_id in dead else 1), (job_id, event_lines)
    starts = [e for e in seen[slow] if e[0] == "start"]
    assert [attempt for _, attempt, _ in starts] == [1, 2]
    assert starts[1][2] > stopped_at
    assert {*later, new_id} <= set(seen)

    # And back, to debug locally: PostgreSQL to a fresh SQLite file.
    local = f"sqlite:///{tmp_path / 'local.db'}"
    back = run_queuecore("copy", "--from", postgresql, "--to", local)
    assert back.returncode == 0, back.stderr
    assert rows(local) == finished
    [slow_again, fresh] = app(
        local,
        "enqueue",
        json.dumps([keyed["slow"][1], {"kind": "work", "payload": {}, "key": "local"}]),
    )
    assert slow_again == {"id": slow, "created": False}
    assert fresh["id"] > new_id


def test_one_application_and_one_command_line_on_either_dsn(tmp_path, monkeypatch, request):
    """The same script, the same commands, only the DSN string differs: the same story."""
    monkeypatch.setenv("SWAP_RUN_LOG", str(tmp_path / "runs.log"))
    told = {}
    jobs_in = json.dumps(
        [
            {"kind": "work", "payload": {"n": 1}, "key": "k"},
            {"kind": "work", "payload": {"n": 1}, "key": "k"},
            {"kind": "poison", "payload": {}},
        ]
    )
    for backend in ("sqlite", "postgresql"):
        if backend == "sqlite":
            dsn = f"sqlite:///{tmp_path / 'one.db'}"
        else:
            dsn = request.getfixturevalue("scratch_databases").create()
        story = [run_queuecore("migrate", "--dsn", dsn).stdout, app(dsn, "enqueue", jobs_in)]
        worker = run_queuecore(*WORKER, "--dsn", dsn, "--exit-when-idle", "1")
        assert worker.returncode == 0, worker.stderr
        story.append(app(dsn, "status", "1", "3"))
        stats = run_queuecore("stats", "--dsn", dsn, "--sqlite-driver", "pysqlite3", "--json")
        story.append(json.loads(stats.stdout)["dead"])
        told[backend] = story
    assert told["sqlite"] == told["postgresql"]
    made = told["sqlite"][1]
    assert made[:2] == [{"id": 1, "created": True}, {"id": 1, "created": False}]
    assert [s["state"] for s in told["sqlite"][2]] == ["done", "dead"]
    assert told["sqlite"][3] == 1
