"""No password on a command line queuecore builds ("Passwords in argv"): a worker given its
DSN in a file or in $QUEUECORE_DSN shows no password in the process list, nor do its fork
server and handler processes, and its log names the database without one. Given with
--dsn, the worker's own command line shows it (with a warning), its children's do not.

PostgreSQL only: its test server trusts every local connection, so a DSN may carry a
password the server ignores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

import queuecore
from tests.worker.processes import queuecore_env, queuecore_process, wait_until

pytestmark = [pytest.mark.postgresql_only, pytest.mark.parametrize("backend", ["postgresql"])]

PASSWORD = "pw-4d7f1c-secret"


def tree(root: int) -> dict[int, str]:
    """The command line of `root` and of every process under it, as `ps` reads them."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found, pending = {}, [root]
    while pending:
        pid = pending.pop()
        try:
            found[pid] = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        pending.extend(child for child, parent in parents.items() if parent == pid)
    return {pid: cmdline.decode(errors="replace") for pid, cmdline in found.items()}


@pytest.mark.parametrize("given", ["dsn-file", "environment", "command-line"])
def test_a_workers_processes_show_no_password(dsn, tmp_path, given):
    secret_dsn = sa.make_url(dsn).set(password=PASSWORD).render_as_string(hide_password=False)
    env = queuecore_env()
    args = [
        "worker",
        "tests.worker.handlers:REGISTRY",
        "--concurrency",
        "2",
        "--grace-seconds",
        "0",
    ]
    if given == "dsn-file":
        dsn_file = tmp_path / "dsn"
        dsn_file.write_text(secret_dsn + "\n")
        dsn_file.chmod(0o600)
        args += ["--dsn-file", str(dsn_file)]
    elif given == "environment":
        env["QUEUECORE_DSN"] = secret_dsn
    else:  # warned against, and shown by the worker's own command line: by no other's
        args += ["--dsn", secret_dsn]
    started = tmp_path / "started"
    with queuecore.connect(secret_dsn) as queue:
        queue.enqueue("slow", {"started": str(started), "seconds": 60})
    log = tmp_path / "worker.log"
    with queuecore_process(*args, log=log, env=env) as worker:
        wait_until(started.exists, worker, log)  # a handler process runs the job
        processes = tree(worker.pid)
        assert len(processes) >= 3, processes  # the worker, its fork server, handlers
        showing = [pid for pid, cmd in processes.items() if PASSWORD in cmd]
        assert showing == ([worker.pid] if given == "command-line" else []), processes
    said = log.read_text()
    assert "worker" in said and PASSWORD not in said
    assert ("warning: --dsn holds a password" in said) == (given == "command-line")
    assert os.environ.get("QUEUECORE_DSN") != secret_dsn
