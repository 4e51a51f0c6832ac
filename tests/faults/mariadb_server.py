"""A MariaDB server of one test module's own, for tests that stop, kill and restart it:
the machine's server, which the rest of the suite and other people use, is never touched.

Made with the distribution's `mariadb-install-db` in a temporary folder and run as a child
process on a free local port (root, no password, as the machine's test server is).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import sqlalchemy as sa
from queuecore.backends.mariadb_harness import DRIVER

SERVER_NAMES = ("mariadbd", "mysqld")
INSTALL_NAMES = ("mariadb-install-db", "mysql_install_db")
SEARCH = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
START_PATIENCE = 60.0


def find(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name) or next(
            (f"{d}/{name}" for d in SEARCH if os.access(f"{d}/{name}", os.X_OK)), None
        )
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PrivateMariaDB:
    """`with PrivateMariaDB() as server:` a running server; `server.dsn` reaches it."""

    def __init__(self) -> None:
        server, install = find(SERVER_NAMES), find(INSTALL_NAMES)
        if server is None or install is None:
            raise FileNotFoundError("no MariaDB server binaries (apt-get install mariadb-server)")
        self._server, self._install = server, install
        self._folder = Path(tempfile.mkdtemp(prefix="queuecore-mariadb-"))
        # Its temporary tables in a folder of its own: in the shared /tmp, the bootstrap
        # lost one mid-install in two CI runs ("Could not remove temporary table
        # '/tmp/#sql-temptable-…', error: 2", then "Unknown table tmp_proxies_priv").
        self._tmp = self._folder / "tmp"
        self.port = free_port()
        self.dsn = f"mariadb+{DRIVER}://root@127.0.0.1:{self.port}/mysql"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrivateMariaDB:
        data = self._folder / "data"
        self._tmp.mkdir()
        made = subprocess.run(
            [self._install, "--no-defaults", f"--datadir={data}", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db",
             f"--tmpdir={self._tmp}"],
            capture_output=True,
            text=True,
        )  # fmt: skip
        if made.returncode != 0:
            raise RuntimeError(
                f"mariadb-install-db exited {made.returncode}:\n{made.stdout[-3000:]}"
                f"\n{made.stderr[-3000:]}"
            )
        self.start()
        return self

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        data = self._folder / "data"
        log = open(self._folder / "server.log", "ab")  # noqa: SIM115 (the child keeps it)
        self._process = subprocess.Popen(
            [self._server, "--no-defaults", f"--datadir={data}", "--user=root",
             f"--port={self.port}", "--bind-address=127.0.0.1",
             f"--socket={self._folder / 'mysqld.sock'}", f"--pid-file={self._folder / 'pid'}",
             "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=16M",
             "--max-connections=200", "--skip-log-bin", f"--tmpdir={self._tmp}"],
            stdout=log,
            stderr=log,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + START_PATIENCE
        while not self._answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"MariaDB did not start: {self.log()[-2000:]}")
            time.sleep(0.1)

    def stop(self, how: str = "fast") -> None:
        """ "fast": SIGTERM, a clean shutdown; "immediate": SIGKILL, a crash that InnoDB
        recovers from its redo log at the next start."""
        if self._process is None:
            return
        self._process.send_signal(signal.SIGTERM if how == "fast" else signal.SIGKILL)
        self._process.wait(timeout=START_PATIENCE)
        self._process = None

    def restart(self, how: str = "fast") -> None:
        self.stop(how)
        self.start()

    def log(self) -> str:
        return (self._folder / "server.log").read_text(errors="replace")

    def _answers(self) -> bool:
        engine = sa.create_engine(self.dsn, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
            return True
        except sa.exc.DBAPIError:
            return False
        finally:
            engine.dispose()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop("immediate")
        shutil.rmtree(self._folder, ignore_errors=True)
