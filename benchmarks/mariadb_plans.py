"""The MariaDB table design of ADR 0012, and its proof: the query plans of the hot
statements over 100,000 finished rows and a few live ones (R19, R16).

MariaDB has no partial indexes. The design puts one generated column in their place,
`live_priority`: the job's priority while it is queued or running, NULL once it is
finished. InnoDB keeps the NULLs in the index too, but all together at its start, so a
range `live_priority IS NOT NULL` never reaches them: the claim walks live rows in
(priority, visible_at, id) order and stops after `limit`, as PostgreSQL's partial index
lets it. Every other read that must skip finished rows leads with `state`, so its range
covers one state only.

The rejected alternative, a plain composite key led by `state`, is measured beside it:
it also never reads a finished row, but `state IN ('queued', 'running')` is two ranges,
so the claim must sort every due live row before it can take the first.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

TABLE = "queuecore_jobs"

#: The table as migrations/mariadb builds it (the probe came first, as ADR 0012's draft;
#: the migration is now the one definition), with its generated column's storage to fill.
_MIGRATION = importlib.import_module("queuecore.migrations.mariadb.0001_mariadb_jobs")
DDL = (
    _MIGRATION.CREATE_TABLE.replace(") VIRTUAL,", ") {storage},"),
    *(f"CREATE INDEX {name} ON {TABLE} ({columns})" for name, columns in _MIGRATION.INDEXES),
)

#: The rejected design: no generated column, the claim's key led by `state`.
REJECTED_INDEX = f"CREATE INDEX ix_rejected_ready ON {TABLE} (state, priority, visible_at, id)"

NOW = "UNIX_TIMESTAMP(NOW(6))"
LIVE_READY = f"live_priority IS NOT NULL AND visible_at <= {NOW} AND attempts < max_attempts"
CLAIM_ORDER = "ORDER BY live_priority, visible_at, id"

#: name -> the statement as the backend would send it: each of queuecore's hot or
#: listing statements. A claim (ADR 0012) reads its candidates without locks, locks
#: them by id, then updates them by id, in one transaction.
STATEMENTS = {
    "claim: candidates": f"SELECT id FROM {TABLE} WHERE {LIVE_READY} {CLAIM_ORDER} LIMIT 10",
    "claim: candidates by queue": f"SELECT id FROM {TABLE} WHERE queue = 'q1' AND "
    f"{LIVE_READY} {CLAIM_ORDER} LIMIT 10",
    "claim: candidates by kind": f"SELECT id FROM {TABLE} WHERE kind IN ('k1') AND "
    f"{LIVE_READY} {CLAIM_ORDER} LIMIT 10",
    "claim: lock by id": f"SELECT id FROM {TABLE} WHERE id IN (1, 2) AND {LIVE_READY} "
    "FOR UPDATE SKIP LOCKED",
    "claim update": f"UPDATE {TABLE} SET state = 'running', attempts = attempts + 1, "
    f"visible_at = {NOW} + 30, lease_token = 'x', worker = 'w' WHERE id IN (1, 2)",
    "R08 lost leases": f"SELECT id FROM {TABLE} WHERE state = 'running' AND "
    f"visible_at <= {NOW} AND attempts >= max_attempts FOR UPDATE SKIP LOCKED",
    "dead list of a queue": f"SELECT id, finished_at FROM {TABLE} WHERE state = 'dead' "
    "AND queue = 'q1' ORDER BY finished_at DESC LIMIT 50",
    "stats: live rows": f"SELECT queue, kind, state, COUNT(*), MIN(visible_at) FROM {TABLE} "
    "WHERE live_priority IS NOT NULL GROUP BY queue, kind, state",
    "stats: dead": f"SELECT queue, COUNT(*) FROM {TABLE} WHERE state = 'dead' GROUP BY queue",
    "stats: cancelled": f"SELECT queue, COUNT(*) FROM {TABLE} WHERE state = 'cancelled' "
    "GROUP BY queue",
    "purge batch": f"SELECT id FROM {TABLE} WHERE state = 'done' AND finished_at < "
    f"{NOW} - 60 LIMIT 1000",
}
REJECTED_CLAIM = (
    f"SELECT id FROM {TABLE} FORCE INDEX (ix_rejected_ready) WHERE state IN "
    f"('queued', 'running') AND visible_at <= {NOW} AND attempts < max_attempts "
    "ORDER BY priority, visible_at, id LIMIT 10"
)

FINISHED, LIVE, BACKLOG = 100_000, 20, 10_000


def fill(cursor: Any, finished: int = FINISHED, live: int = LIVE) -> None:
    """`finished` rows (one in twenty dead, one in twenty cancelled, the rest done), in
    every queue and of every kind the statements name, so only the index design can
    spare them; then `live` ready jobs. Made on the server (the Sequence engine's
    `seq_1_to_N` table): a client-side insert of 100,000 rows takes minutes."""
    if finished:
        cursor.execute(
            f"INSERT INTO {TABLE} (kind, queue, payload, priority, state, attempts, max_attempts, "
            "visible_at, created_at, finished_at) "
            "SELECT CONCAT('k', seq % 3), CONCAT('q', seq % 3), '{}', 0, "
            "CASE seq % 20 WHEN 0 THEN 'dead' WHEN 1 THEN 'cancelled' ELSE 'done' END, "
            f"1, 3, 1000 + seq, 1000, 1000 + seq FROM seq_1_to_{finished}"
        )
    cursor.execute(
        f"INSERT INTO {TABLE} (kind, queue, payload, priority, state, attempts, max_attempts, "
        "visible_at, created_at) SELECT CONCAT('k', seq % 3), CONCAT('q', seq % 3), '{}', 0, "
        f"'queued', 0, 3, 1000, 1000 FROM seq_1_to_{live}"
    )
    cursor.execute(f"ANALYZE TABLE {TABLE}")
    cursor.fetchall()


def explain(cursor: Any, sql: str) -> dict[str, Any]:
    """The plan (`EXPLAIN`) and what running it read (`ANALYZE FORMAT=JSON`): the
    index, the access type, and the rows the engine examined (`r_rows` summed over
    the tables of the plan). ANALYZE runs the statement, so it runs in a transaction
    that is rolled back."""
    cursor.execute("EXPLAIN " + sql)
    names = [d[0] for d in cursor.description]
    plan = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    cursor.execute("ANALYZE FORMAT=JSON " + sql)
    analyzed = json.loads(cursor.fetchone()[0])
    cursor.connection.rollback()
    return {
        "key": plan[0]["key"],
        "type": plan[0]["type"],
        "extra": plan[0]["Extra"],
        "rows_examined": sum(_r_rows(analyzed)),
        "filesort": "filesort" in json.dumps(analyzed),
    }


def _r_rows(node: Any) -> list[float]:
    """Every `r_rows` in an ANALYZE FORMAT=JSON tree."""
    if isinstance(node, dict):
        found = [float(node["r_rows"])] if "r_rows" in node else []
        return found + [r for value in node.values() for r in _r_rows(value)]
    if isinstance(node, list):
        return [r for item in node for r in _r_rows(item)]
    return []


def prove(cursor: Any, storage: str) -> list[dict[str, Any]]:
    """The table with `live_priority` VIRTUAL or PERSISTENT, filled; every statement's
    plan, then the rejected design's claim beside it."""
    cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
    for statement in DDL:
        cursor.execute(statement.format(storage=storage))
    fill(cursor)
    cursor.connection.commit()
    found = [{"statement": name, **explain(cursor, sql)} for name, sql in STATEMENTS.items()]
    cursor.execute(REJECTED_INDEX)
    rejected = explain(cursor, REJECTED_CLAIM)
    found.append({"statement": "candidates, rejected key on state", **rejected})
    # A backlog: the rejected key must sort every due live row before it takes ten.
    fill(cursor, finished=0, live=BACKLOG)
    cursor.connection.commit()
    candidates = STATEMENTS["claim: candidates"]
    found.append({"statement": f"candidates, {BACKLOG:,} ready", **explain(cursor, candidates)})
    found.append({"statement": f"rejected, {BACKLOG:,} ready", **explain(cursor, REJECTED_CLAIM)})
    return found
