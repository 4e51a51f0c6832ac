"""A synchronous streaming standby of a `PrivateCluster`, for the failover test: made by
pg_basebackup from the running primary, started as a hot standby on a port of its own,
and promoted when the primary is gone."""

from __future__ import annotations

import sqlalchemy as sa

from queuecore.conformance.postgresql_server import SUPERUSER, PrivateCluster
from tests.faults.helpers import wait_until

#: The name the primary's synchronous_standby_names waits for.
STANDBY_NAME = "standby1"


class Standby(PrivateCluster):
    """Entering copies the primary's data and starts streaming from it; leaving stops
    it and removes its folder, as a PrivateCluster does."""

    def __init__(self, primary: PrivateCluster) -> None:
        conninfo = (
            f"host=127.0.0.1 port={primary.port} user={SUPERUSER} application_name={STANDBY_NAME}"
        )
        # Copied from the primary, synchronous_standby_names would make the promoted
        # server wait at every commit for a standby it does not have: for ever.
        settings = {"primary_conninfo": conninfo, "synchronous_standby_names": ""}
        super().__init__(primary.bindir, settings=settings)
        self.primary = primary

    def _fill(self) -> None:
        self._run(
            "pg_basebackup",
            *("-D", str(self._data), "-h", "127.0.0.1", "-p", str(self.primary.port)),
            *("-U", SUPERUSER, "-X", "stream", "--no-sync", "-c", "fast"),
        )
        (self._data / "standby.signal").touch()

    def promote(self) -> None:
        """Make it the primary (it stops streaming, and takes writes)."""
        self._pg_ctl("promote")


def make_synchronous(primary: PrivateCluster) -> None:
    """From now on the primary acknowledges a commit once the standby has it too
    (synchronous_commit = on, the default): no acknowledged commit is lost to a failover."""
    admin = sa.create_engine(primary.dsn, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            conn.exec_driver_sql("SELECT pg_reload_conf()")

        def synchronous() -> bool:
            with admin.connect() as conn:
                state = conn.exec_driver_sql(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = "
                    f"'{STANDBY_NAME}' AND state = 'streaming'"
                ).scalar()
            return state == "sync"

        wait_until(synchronous, "the standby streams synchronously")
    finally:
        admin.dispose()


def multi_host_dsn(database: str, *servers: PrivateCluster) -> str:
    """One DSN naming every server; libpq connects to the first that takes writes."""
    hosts = "&".join(f"host=127.0.0.1:{server.port}" for server in servers)
    return f"postgresql+psycopg://{SUPERUSER}@/{database}?{hosts}&target_session_attrs=read-write"
