"""R30: a full disk is `queuecore.StorageFullError` on both faces, with the driver's error
as its cause and nothing half-written; the command line says it in one line and exits 1;
a worker says it once when it starts and once when it ends, not on every claim.

The disk is a small tmpfs of the test's own (mounting one needs root: skipped without):
SQLite's file on it, or a private PostgreSQL cluster's data directory."""

from __future__ import annotations

import errno
import secrets
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import queuecore
from queuecore.cli.main import main
from queuecore.conformance.postgresql_server import PrivateCluster, ServerUnavailable
from tests.worker.processes import queuecore_process, wait_until

BLOB = {"blob": "x" * 20_000}


@contextmanager
def tmpfs(disk: Path, size: str) -> Iterator[Path]:
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "2m") as disk:
        yield disk


def fill(disk: Path) -> Path:
    """Take every byte the disk has left; removing the file frees them."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def count(dsn: str, where: str = "1 = 1") -> int:
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            query = f"SELECT count(*) FROM queuecore_jobs WHERE {where}"
            return int(conn.exec_driver_sql(query).scalar_one())
    finally:
        engine.dispose()


def until_full(enqueue: Callable[[], Any], dsn: str) -> queuecore.StorageFullError:
    """Enqueue batches until the disk refuses one; that batch must have left no row."""
    for _ in range(200):  # SQLite may reuse its write-ahead log's space for a while
        before = count(dsn)
        try:
            enqueue()
        except queuecore.StorageFullError as exc:
            assert count(dsn) == before  # nothing of the batch was written
            return exc
    raise AssertionError("the disk never filled up")


def assert_says_full(error: queuecore.StorageFullError, dsn: str, said: str) -> None:
    assert isinstance(error, queuecore.QueuecoreError)
    assert isinstance(error.__cause__, sa.exc.DBAPIError)
    assert said in str(error)
    assert dsn.removeprefix("sqlite:///") in str(error)  # it names the database


def test_r30_a_full_disk_is_a_storage_full_error_on_both_faces(small_disk, connect, caplog):
    dsn = f"sqlite:///{small_disk / 'jobs.db'}"
    queue = connect(dsn)
    try:
        queue.enqueue_many("k", [{}, {}])
        queue.complete(queue.claim("w")[0])  # for the purge
        filler = fill(small_disk)
        error = until_full(lambda: queue.enqueue_many("k", [BLOB] * 5), dsn)
        assert_says_full(error, dsn, "database or disk is full")
        with pytest.raises(queuecore.StorageFullError):
            queue.enqueue("k", BLOB)
        with pytest.raises(queuecore.StorageFullError, match="purge: "):
            queue.purge(older_than=0)
        assert queue.stats()["queued"] >= 1  # reads still work
        filler.unlink()
        queue.enqueue("k", {})
    finally:
        queue.close()
    said = [r.getMessage() for r in caplog.records if r.name == "queuecore"]
    assert len(said) == 2, said  # once when it starts, once when it ends
    assert " is full" in said[0] and "writes succeed again" in said[1], said


def test_r30_a_copy_into_a_full_disk_is_a_storage_full_error(small_disk, tmp_path):
    source = f"sqlite:///{tmp_path / 'source.db'}"
    with queuecore.connect(source) as queue:
        queue.enqueue_many("k", [{"blob": secrets.token_hex(20_000)} for _ in range(100)])
    target = f"sqlite:///{small_disk / 'target.db'}"
    with pytest.raises(queuecore.StorageFullError, match=r"copy: the database .* is full"):
        queuecore.copy(source, target, batch=10)


def test_r30_the_command_line_says_a_full_disk_in_one_line(small_disk, capsys):
    dsn = f"sqlite:///{small_disk / 'jobs.db'}"
    with queuecore.connect(dsn, max_attempts=1) as queue:
        queue.enqueue("k", {})
        (job,) = queue.claim("w")
        queue.fail(job, "boom")
        fill(small_disk)
        until_full(lambda: queue.enqueue_many("k", [BLOB] * 5), dsn)
    capsys.readouterr()
    assert main(["dead", "requeue", "--all", "--dsn", dsn]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("queuecore dead: requeue_dead: the database")
    assert "database or disk is full" in err


def test_r30_a_worker_says_a_full_disk_once_when_it_starts_and_once_when_it_ends(
    small_disk, tmp_path
):
    dsn = f"sqlite:///{small_disk / 'jobs.db'}"
    with queuecore.connect(dsn) as queue:
        queue.enqueue_many("quick", [{}] * 3)
        filler = fill(small_disk)
        until_full(lambda: queue.enqueue_many("k", [BLOB] * 5), dsn)
    log = tmp_path / "worker.log"
    args = ["worker", "tests.worker.handlers:REGISTRY", "--dsn", dsn, "--poll-interval", "0.1"]
    with queuecore_process(*args, log=log) as worker:
        wait_until(lambda: "is full" in log.read_text(), worker, log)
        time.sleep(10)  # a claim every 0.1 s: a hundred tries meet the full disk
        lines_while_full = log.read_text().splitlines()
        filler.unlink()
        wait_until(lambda: "writes succeed again" in log.read_text(), worker, log)
        wait_until(lambda: count(dsn, "state = 'done'") == 3, worker, log)
        worker.terminate()
        worker.wait(timeout=30)
    said_full = [line for line in lines_while_full if "full" in line]
    assert len(said_full) == 1, lines_while_full
    assert len(lines_while_full) <= 3, lines_while_full  # the start, "worker ... started"


@pytest.mark.postgresql_only
@pytest.mark.xdist_group("private-pg")
def test_r30_a_full_disk_is_a_storage_full_error_on_postgresql(monkeypatch):
    """A private cluster whose data directory sits on a small tmpfs (its WAL segments are
    allocated ahead, so the tables' files are what cannot grow: DiskFull, 53100). The
    mount point is outside pytest's folders, which the server's own user cannot enter."""
    base = Path(tempfile.mkdtemp(prefix="queuecore-small-disk-"))
    base.chmod(0o755)
    with tmpfs(base / "disk", "160m") as disk:
        monkeypatch.setattr(tempfile, "tempdir", str(disk))  # the cluster's folder
        try:
            cluster = PrivateCluster(settings={"max_wal_size": "32MB", "min_wal_size": "32MB"})
        except ServerUnavailable as exc:
            pytest.skip(str(exc))
        with cluster:
            queuecore.migrate(cluster.dsn)
            with queuecore.connect(cluster.dsn) as queue:
                queue.enqueue("k", {})
                filler = fill(disk)
                # Random text: compressed, a repeated one would take no room at all.
                blobs = lambda: [{"blob": secrets.token_hex(20_000)} for _ in range(5)]  # noqa: E731
                error = until_full(lambda: queue.enqueue_many("k", blobs()), cluster.dsn)
                assert_says_full(error, "127.0.0.1", "No space left on device")
                assert error.__cause__.orig.sqlstate == "53100"
                filler.unlink()
                queue.enqueue("k", {})
    base.joinpath("disk").rmdir()
    base.rmdir()
