"""The conformance kit's harness for MariaDB (`queuecore.conformance.harness`): the server
named by $QUEUECORE_TEST_MARIADB_DSN (by default the local one, root without a password),
one migrated database for the session emptied before each test, and throw-away
databases on demand, all dropped at the end."""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa

from queuecore.conformance.harness import PRIMARY_KEY, Harness, Plan, Unavailable
from queuecore.conformance.server_harness import ServerHarness
from queuecore.sql.schema import jobs

from .mariadb import utc_sessions

_READY = ("ix_queuecore_jobs_ready", "ix_queuecore_jobs_ready_by_queue")
_BY_STATE = ("ix_queuecore_jobs_state", "ix_queuecore_jobs_finished", "ix_queuecore_jobs_leases")
ENV_DSN = "QUEUECORE_TEST_MARIADB_DSN"
#: The driver the tests reach MariaDB through when $QUEUECORE_TEST_MARIADB_DSN names none:
#: mysqlclient (the `mariadb` extra, what CI installs and users are advised to run) when
#: it is installed, else PyMySQL, which the `dev` extra installs: a wheel, so the test
#: set-up needs no C compiler, pkg-config or libmariadb-dev.
DRIVER = "mysqldb" if find_spec("MySQLdb") is not None else "pymysql"
DEFAULT_DSN = f"mariadb+{DRIVER}://root@127.0.0.1:3306/test"


class MariaDBHarness(ServerHarness):
    name: ClassVar[str] = "mariadb"
    server_clock_sql: ClassVar[str | None] = "NOW(6)"
    # Keys that lead with `state` read the rows of the states asked for only, and the
    # claim's, led by the generated column, the live rows only (migrations/mariadb).
    index_names: ClassVar[dict[str, frozenset[str]]] = {
        **Harness.index_names,
        "live": frozenset({*_READY, *_BY_STATE}),
        "running": frozenset({*_READY, *_BY_STATE}),
        **dict.fromkeys(("done", "dead", "cancelled"), frozenset(_BY_STATE)),
    }

    product: ClassVar[str] = "MariaDB"
    # TRUNCATE: the rows go, and the AUTO_INCREMENT counter starts again at 1.
    empty_sql: ClassVar[str] = f"TRUNCATE TABLE {jobs.name}"

    def start(self, scratch: Path) -> None:
        dsn = os.environ.get(ENV_DSN) or DEFAULT_DSN
        try:
            self.open_server(dsn)
        except (ImportError, sa.exc.DBAPIError) as exc:
            raise Unavailable(f"{ENV_DSN}={dsn} is not reachable: {exc}") from exc

    def unreachable(self, scratch: Path) -> str:
        return f"mariadb+{DRIVER}://root@127.0.0.1:1/queuecore"  # nothing listens on port 1

    def engine(self, dsn: str) -> sa.Engine:
        """Sessions in UTC, as the queue's are, so NOW() reads the same there."""
        engine = sa.create_engine(dsn)
        utc_sessions(engine)
        return engine

    def server_now(self, engine: sa.Engine) -> float:
        with engine.connect() as conn:
            now = conn.exec_driver_sql("SELECT UNIX_TIMESTAMP(NOW(6)) + 0e0").scalar_one()
        return float(now)

    def explain(self, conn: sa.Connection, sql: str, parameters: Any) -> Plan:
        """From the tabular EXPLAIN: a row per table read, with its key and access type."""
        rows = [r._mapping for r in conn.exec_driver_sql(f"EXPLAIN {sql}", parameters)]
        ours = [r for r in rows if r["table"] == jobs.name]
        return Plan(
            indexes=frozenset(
                PRIMARY_KEY if r["key"] == "PRIMARY" else r["key"] for r in ours if r["key"]
            ),
            full_scan=any(r["type"] == "ALL" for r in ours),
            sorts=any("filesort" in (r["Extra"] or "") for r in rows),
        )

    def analyze(self, conn: sa.Connection) -> None:
        conn.exec_driver_sql(f"ANALYZE TABLE {jobs.name}")
