"""A private PgBouncer in transaction mode in front of a PostgreSQL server (R34): the
pooler many deployments reach PostgreSQL through, which hands each transaction whichever
server connection is free. Debian's package (1.18) keeps no prepared statement across
transactions, and drops LISTEN and session locks as they happen.

`PgBouncer` is a context manager: entering writes its configuration into a temporary
folder and starts it as a child process on a free port of 127.0.0.1, leaving stops it and
removes the folder. Every database name is passed through to the server's database of
the same name, so a database made on the server is reached through the pooler at once.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import sqlalchemy as sa

from queuecore.conformance.postgresql_server import (
    SUPERUSER,
    ServerUnavailable,
    _free_port,
    _unprivileged_owner,
)

ENV_BINARY = "QUEUECORE_TEST_PGBOUNCER"
#: Where Debian puts it (outside a normal user's PATH).
DEBIAN_BINARY = "/usr/sbin/pgbouncer"
#: What a DSN through the pooler says, so that psycopg prepares nothing on the server.
POOLED_QUERY = {"prepare_threshold": "none"}
STARTUP_DEADLINE = 20.0


def find_pgbouncer() -> Path | None:
    """The pgbouncer program, or None when it is not installed."""
    for candidate in (os.environ.get(ENV_BINARY), shutil.which("pgbouncer"), DEBIAN_BINARY):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


class PgBouncer:
    """PgBouncer, `pool_mode = transaction`, trust auth, in front of the server of
    `server_dsn`. `dsn(database)` is a DSN of that database through it, with the one
    option queuecore needs there (`?prepare_threshold=none`)."""

    def __init__(self, server_dsn: str, *, pool_size: int = 20) -> None:
        binary = find_pgbouncer()
        if binary is None:
            raise ServerUnavailable(
                f"pgbouncer is not installed (looked at ${ENV_BINARY}, PATH, {DEBIAN_BINARY}); "
                "Debian: apt-get install pgbouncer"
            )
        self.binary = binary
        self.server = sa.make_url(server_dsn)
        self.pool_size = pool_size
        self.folder: Path | None = None
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def dsn(self, database: str | None = None) -> str:
        """A DSN of `database` (the server DSN's by default) through the pooler."""
        name = self.server.database if database is None else database
        url = self.server.set(host="127.0.0.1", port=self.port, database=name)
        return url.update_query_dict(POOLED_QUERY).render_as_string(hide_password=False)

    def __enter__(self) -> PgBouncer:
        with ExitStack() as on_failure:
            on_failure.callback(self.close)
            self._start()
            on_failure.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="queuecore-pgbouncer-"))
        owner = _unprivileged_owner()  # pgbouncer refuses to run as root
        self.port = _free_port()
        user = self.server.username or SUPERUSER
        (self.folder / "users.txt").write_text(f'"{user}" ""\n')
        (self.folder / "pgbouncer.ini").write_text(self._config())
        if owner is not None:
            for path in (self.folder, *self.folder.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self._process = subprocess.Popen(
            [str(self.binary), "-q", str(self.folder / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=owner.pw_uid if owner else None,
            group=owner.pw_gid if owner else None,
            extra_groups=[] if owner else None,
        )
        deadline = time.monotonic() + STARTUP_DEADLINE
        while not self._accepting():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise ServerUnavailable(f"pgbouncer did not start:\n{self._log_tail()}")
            time.sleep(0.05)

    def _config(self) -> str:
        assert self.folder is not None
        target = f"host={self.server.host or '127.0.0.1'} port={self.server.port or 5432}"
        return "\n".join(
            [
                "[databases]",
                f"* = {target}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {self.folder / 'users.txt'}",
                "pool_mode = transaction",
                f"default_pool_size = {self.pool_size}",
                "max_client_conn = 1000",
                "server_reset_query =",
                f"logfile = {self.folder / 'pgbouncer.log'}",
                f"pidfile = {self.folder / 'pgbouncer.pid'}",
                "",
            ]
        )

    def _accepting(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _log_tail(self, lines: int = 15) -> str:
        log = self.folder / "pgbouncer.log" if self.folder else None
        if log is None or not log.exists():
            return ""
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """Stop it (SIGTERM: at once, connections and all) and remove its folder."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
