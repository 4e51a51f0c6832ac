"""PostgreSQL: many hosts. Claims skip rows other claims hold (FOR UPDATE SKIP LOCKED)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import URL, Double, Engine, func, make_url, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.elements import ColumnElement

from queuecore.sqlqueue import SQLQueue


class PostgresQueue(SQLQueue):
    _insert = staticmethod(postgresql.insert)

    @classmethod
    def create_engine(cls, bind: str | URL | Engine, **options: Any) -> Engine:
        if isinstance(bind, Engine):
            return bind
        url = make_url(bind)
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
        try:
            return sa.create_engine(url, **options)
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                f"{exc}; the PostgreSQL backend needs psycopg 3: "
                "pip install 'queuecore[postgresql]'"
            ) from exc

    def _server_now(self) -> ColumnElement[float]:
        """The server's clock, read once per statement (an InitPlan): workers on several
        hosts share it, so their own clocks' skew cannot shorten or stretch a lease.
        `now()` would be the transaction's start, not the statement's."""
        return select(
            sa.cast(func.extract("epoch", func.clock_timestamp()), Double)
        ).scalar_subquery()
