"""Where the PostgreSQL half of the suite gets its server, in this order:

1. `QUEUECORE_TEST_POSTGRES_DSN`: a server somebody else runs and keeps running;
2. a private throw-away cluster made from the local server binaries (initdb, pg_ctl) in
   a temporary folder, on a free port, removed when the session ends;
3. the repository's compose.yaml, when Docker with a running engine is there.

`PrivateCluster` is public on purpose: a test that restarts or crashes PostgreSQL gets
a cluster of its own, so the server the rest of the suite (and anybody else on the
machine) uses is never disturbed.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Literal

import sqlalchemy as sa

ENV_DSN = "QUEUECORE_TEST_POSTGRES_DSN"
ENV_BINDIR = "QUEUECORE_TEST_POSTGRES_BINDIR"
ENV_RUN_AS = "QUEUECORE_TEST_POSTGRES_USER"

# Where Debian and Ubuntu put each installed major version's server binaries.
DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin"
#: The repository's compose file, when the kit runs from a source checkout.
COMPOSE_FILE = Path(__file__).resolve().parents[2] / "compose.yaml"
COMPOSE_SERVICE = "postgres"
SUPERUSER = "postgres"

# Safe against a killed server process (the written WAL is in the OS cache), which is the
# fault tests inject; only a power loss could lose data, and these clusters are throw-away.
DEFAULT_SETTINGS: Mapping[str, str] = {"fsync": "off", "max_connections": "200"}

StopMode = Literal["smart", "fast", "immediate"]


class ServerUnavailable(RuntimeError):
    """This way of getting a PostgreSQL server does not work here; the message says why."""


def reachable(dsn: str) -> str | None:
    """None when the server answers, else why not."""
    engine = sa.create_engine(dsn)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        return None
    except Exception as exc:  # any failure means "not usable": say which
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    finally:
        engine.dispose()


def find_server_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl, or None when this machine has no server."""
    candidates: list[str] = []
    if os.environ.get(ENV_BINDIR):
        candidates.append(os.environ[ENV_BINDIR])
    pg_config = shutil.which("pg_config")
    if pg_config:
        # pg_config also ships with the client library alone: its bindir may lack initdb.
        result = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=False
        )
        candidates.append(result.stdout.strip())
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    candidates.extend(sorted(glob.glob(DEBIAN_BINDIRS), key=_major_version, reverse=True))
    for folder in candidates:
        if folder and all(os.access(Path(folder, tool), os.X_OK) for tool in ("initdb", "pg_ctl")):
            return Path(folder)
    return None


def _major_version(folder: str) -> int:
    """Sorts /usr/lib/postgresql/9/bin below .../16/bin: newest first."""
    match = re.search(r"/(\d+)(?:\.\d+)?/bin$", folder)
    return int(match.group(1)) if match else -1


def _unprivileged_owner() -> pwd.struct_passwd | None:
    """initdb refuses to run as root; as root the cluster is made and run by this user."""
    if os.geteuid() != 0:
        return None
    wanted = os.environ.get(ENV_RUN_AS)
    for name in [wanted] if wanted else ["postgres", "nobody"]:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ServerUnavailable(
        f"running as root, and initdb needs an unprivileged user to run as: no user "
        f"{wanted or 'postgres or nobody'!r} exists (set {ENV_RUN_AS} to an existing one)"
    )


def _conf_string(value: str) -> str:
    """A postgresql.conf string literal: quotes doubled, so any path is taken as it is."""
    return "'" + value.replace("'", "''") + "'"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """A throw-away PostgreSQL cluster: a temporary folder holding its data, its log and
    its unix socket, listening on a free port of 127.0.0.1 with trust auth.

    Use it as a context manager: entering creates and starts it, leaving stops it and
    removes the folder. In between a test may `stop()` it (mode "immediate" is a crash:
    no checkpoint, recovery from WAL at the next start), `start()` it and `restart()` it.
    """

    def __init__(
        self, bindir: Path | None = None, *, settings: Mapping[str, str] | None = None
    ) -> None:
        found = bindir or find_server_binaries()
        if found is None:
            raise ServerUnavailable(
                "no PostgreSQL server binaries (initdb, pg_ctl) found through "
                f"${ENV_BINDIR}, pg_config --bindir, PATH or {DEBIAN_BINDIRS}"
            )
        self.bindir = found
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self._owner = _unprivileged_owner()
        self.folder: Path | None = None
        self.port = 0

    @property
    def dsn(self) -> str:
        """The superuser's maintenance database; other databases live on the same server."""
        if not self.port:
            raise RuntimeError("the cluster has not been created yet: use it in a with block")
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    @property
    def _data(self) -> Path:
        assert self.folder is not None
        return self.folder / "data"

    @property
    def _log(self) -> Path:
        assert self.folder is not None
        return self.folder / "server.log"

    def __enter__(self) -> PrivateCluster:
        try:
            self._create()
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="queuecore-pg-"))
        if self._owner is not None:
            os.chown(self.folder, self._owner.pw_uid, self._owner.pw_gid)
        self._fill()
        self.port = _free_port()
        self._configure(
            listen_addresses="127.0.0.1",
            unix_socket_directories=str(self.folder),
            port=str(self.port),
            **self.settings,
        )

    def _fill(self) -> None:
        """Write the data folder: a new cluster (a standby's would copy a primary's)."""
        self._run(
            "initdb",
            *("-D", str(self._data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8"),
            *("--no-locale", "--no-sync", "--no-instructions"),
        )

    def _configure(self, **settings: str) -> None:
        """Appended to postgresql.conf, where a later line wins over an earlier one."""
        lines = [f"{name} = {_conf_string(value)}" for name, value in settings.items()]
        with (self._data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# queuecore test cluster\n" + "\n".join(lines) + "\n")

    def start(self) -> None:
        """Start and wait until it accepts connections. The free port was free when it was
        chosen; if somebody took it since, the next free one is tried."""
        for attempt in range(3):
            try:
                self._pg_ctl("start", "-l", str(self._log))
                return
            except ServerUnavailable:
                if attempt == 2 or "could not bind" not in self._log_tail():
                    raise
                self.port = _free_port()
                self._configure(port=str(self.port))

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop; "immediate" kills the server the way a crash would."""
        self._pg_ctl("stop", "-m", mode)

    def restart(self, mode: StopMode = "fast") -> None:
        self._pg_ctl("restart", "-m", mode, "-l", str(self._log))

    def close(self) -> None:
        """Stop the server if it runs, and remove everything it wrote."""
        if self.folder is None:
            return
        try:
            if (self._data / "postmaster.pid").exists():
                self.stop(mode="immediate")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _pg_ctl(self, action: str, *options: str) -> None:
        self._run("pg_ctl", action, "-D", str(self._data), "-w", "-t", "60", *options)

    def _run(self, tool: str, *args: str) -> None:
        owner = self._owner
        result = subprocess.run(
            [str(self.bindir / tool), *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.folder,
            env={**os.environ, "LC_ALL": "C"},
            stdin=subprocess.DEVNULL,
            user=owner.pw_uid if owner else None,
            group=owner.pw_gid if owner else None,
            extra_groups=[] if owner else None,
        )
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip()
            raise ServerUnavailable(
                f"`{tool} {' '.join(args)}` failed ({result.returncode}): {said}\n"
                + self._log_tail()
            )

    def _log_tail(self, lines: int = 15) -> str:
        if self.folder is None or not self._log.exists():
            return ""
        return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])


def _quiet(command: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(command, 124, "", f"timed out after {exc.timeout}s")


@contextmanager
def compose_postgres(compose_file: Path = COMPOSE_FILE) -> Iterator[str]:
    """The compose service, brought up if needed and waited for (its healthcheck); taken
    down at the end only if this call brought it up."""
    docker = shutil.which("docker")
    if docker is None:
        raise ServerUnavailable("docker is not installed")
    if _quiet([docker, "info"]).returncode != 0:
        raise ServerUnavailable("docker is installed, but no Docker engine is running")
    if _quiet([docker, "compose", "version"]).returncode != 0:
        raise ServerUnavailable("docker has no compose plugin")
    compose = [docker, "compose", "-f", str(compose_file)]
    running = _quiet([*compose, "ps", "-q", "--status", "running", COMPOSE_SERVICE])
    was_running = bool(running.stdout.strip())
    up = _quiet([*compose, "up", "-d", "--wait", COMPOSE_SERVICE], timeout=600)
    if up.returncode != 0:
        raise ServerUnavailable(f"docker compose up failed: {up.stderr.strip()[-500:]}")
    try:
        published = _quiet([*compose, "port", COMPOSE_SERVICE, "5432"]).stdout.strip()
        port = published.rsplit(":", 1)[-1]
        if not port.isdigit():
            raise ServerUnavailable(f"docker compose port gave {published!r}, not host:port")
        yield f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{port}/postgres"
    finally:
        if not was_running:
            _quiet([*compose, "down", "-v"], timeout=300)


@contextmanager
def find_or_start_postgres() -> Iterator[tuple[str | None, str | None]]:
    """Yields (dsn, None) for a usable server, or (None, why there is none)."""
    dsn = os.environ.get(ENV_DSN)
    if dsn:
        problem = reachable(dsn)
        yield (None, f"{ENV_DSN}={dsn} is not reachable: {problem}") if problem else (dsn, None)
        return
    reasons = [f"{ENV_DSN} is not set"]
    with ExitStack() as stack:
        for name, start in (
            ("local binaries", _private_cluster_dsn),
            ("compose", compose_postgres),
        ):
            try:
                dsn = stack.enter_context(start())
            except ServerUnavailable as exc:
                reasons.append(f"{name}: {exc}")
                continue
            yield dsn, None
            return
    yield None, "; ".join(reasons)


@contextmanager
def _private_cluster_dsn() -> Iterator[str]:
    with PrivateCluster() as cluster:
        yield cluster.dsn
