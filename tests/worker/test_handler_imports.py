"""A `queuecore worker` imports its database driver before it forks its fork server, so
every handler process starts with the driver imported: one that connects for a job's
effects, or replaces one that died, does not import it again (`connect.load_driver`)."""

from __future__ import annotations

from queuecore.connect import load_driver
from tests.worker.processes import run_queuecore


def test_a_handler_process_starts_with_the_database_driver_imported(make_queue, dsn):
    queue = make_queue(clock=None)
    driver = queue.engine.dialect.loaded_dbapi.__name__
    job = queue.enqueue("imported", {"modules": [driver]})
    worker = run_queuecore(
        "worker", "tests.worker.handlers:REGISTRY", "--dsn", dsn, "--exit-when-idle", "0.3"
    )
    assert worker.returncode == 0, worker.stderr
    assert queue.get(job.id).result == [driver]


def test_a_dsn_that_names_no_backend_is_left_for_connect_to_report():
    load_driver("nosuchdb://somewhere/db")
    load_driver("not a url")
