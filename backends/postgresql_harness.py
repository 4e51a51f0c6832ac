"""The conformance kit's harness for PostgreSQL (`queuecore.conformance.harness`): a
server found or started (`queuecore.conformance.postgresql_server`), one migrated
database for the session emptied before each test, and throw-away databases on demand,
all dropped at the end. `PgBouncerHarness` runs the same through a private PgBouncer in
transaction mode (R34)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa

from queuecore.conformance.harness import PRIMARY_KEY, Plan, Unavailable
from queuecore.conformance.pgbouncer import PgBouncer
from queuecore.conformance.postgresql_server import ServerUnavailable, find_or_start_postgres
from queuecore.conformance.server_harness import ServerHarness
from queuecore.sql.schema import jobs

from .postgresql import SORT_NODES, engine_arguments, plan_nodes


class PostgresHarness(ServerHarness):
    name: ClassVar[str] = "postgresql"
    capabilities: ClassVar[frozenset[str]] = frozenset({"listen", "shared_chain"})
    server_clock_sql: ClassVar[str | None] = "clock_timestamp()"
    product: ClassVar[str] = "PostgreSQL"
    version_sql: ClassVar[str] = "SHOW server_version"
    empty_sql: ClassVar[str] = f"TRUNCATE {jobs.name} RESTART IDENTITY"
    drop_sql: ClassVar[str] = "DROP DATABASE IF EXISTS {name} WITH (FORCE)"

    def __init__(self) -> None:
        super().__init__()
        self._servers = ExitStack()

    def start(self, scratch: Path) -> None:
        dsn, problem = self._servers.enter_context(find_or_start_postgres())
        if dsn is None:
            self._servers.close()
            raise Unavailable(problem or "no server")
        self.open_server(dsn)

    def server_now(self, engine: sa.Engine) -> float:
        with engine.connect() as conn:
            now = conn.execute(sa.text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one()
        return float(now)

    def explain(self, conn: sa.Connection, sql: str, parameters: Any) -> Plan:
        (document,) = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {sql}", parameters).scalar_one()
        nodes = list(plan_nodes(document["Plan"]))
        indexes = {node["Index Name"] for node in nodes if "Index Name" in node}
        return Plan(
            indexes=frozenset(PRIMARY_KEY if i == f"{jobs.name}_pkey" else i for i in indexes),
            full_scan=any(
                n["Node Type"] == "Seq Scan" and n.get("Relation Name") == jobs.name for n in nodes
            ),
            sorts=any(n["Node Type"] in SORT_NODES for n in nodes),
        )

    def unreachable(self, scratch: Path) -> str:
        return "postgresql+psycopg://postgres@127.0.0.1:1/queuecore"  # nothing listens on 1

    def stop(self) -> None:
        super().stop()
        self._servers.close()


class PgBouncerHarness(PostgresHarness):
    """The PostgreSQL half through PgBouncer in transaction mode, on the DSN a user
    behind one writes (`?prepare_threshold=none`): the databases are made and emptied on
    the server, and every test's queue reaches them through the pooler. No "listen": a
    pooler drops LISTEN, so the tests that need a NOTIFY to arrive are not made for it."""

    name: ClassVar[str] = "pgbouncer"
    capabilities: ClassVar[frozenset[str]] = frozenset({"shared_chain"})

    def start(self, scratch: Path) -> None:
        super().start(scratch)
        try:
            self._bouncer = self._servers.enter_context(PgBouncer(self.server))
        except ServerUnavailable as exc:
            self.stop()
            raise Unavailable(str(exc)) from exc

    def fresh(self, scratch: Path) -> str:
        return self._pooled(super().fresh(scratch))

    def unmigrated(self, scratch: Path) -> str:
        return self._pooled(super().unmigrated(scratch))

    def engine(self, dsn: str) -> sa.Engine:
        url, options = engine_arguments(dsn, {})
        return sa.create_engine(url, **options)

    def describe(self) -> str | None:
        said = super().describe()
        return f"{said}, through PgBouncer {self._bouncer.binary} (transaction mode)"

    def _pooled(self, direct: str) -> str:
        return self._bouncer.dsn(sa.make_url(direct).database)
