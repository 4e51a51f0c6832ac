"""The floors: the same queue rules written by hand on the bare drivers, as the bar
queuecore is measured against.

Same table and indexes as queuecore (so only the code path differs), and the same
rules: R08's retire step before every claim, the claim order of R05 (priority,
visible_at, id), R06's lease, token and attempt count, R09's fenced complete, time
from the local clock on SQLite and from the server's `clock_timestamp()` on
PostgreSQL (R20). Each claim and each complete is its own committed transaction.
No shortcut is taken that queuecore could not take too.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from typing import Any

RETIRE_WHERE = "state = 'running' AND visible_at <= {now} AND attempts >= max_attempts"
READY_WHERE = "state IN ('queued', 'running') AND visible_at <= {now} AND attempts < max_attempts"
ORDER = "ORDER BY priority, visible_at, id"
LAST_ATTEMPT = "'lease expired on the last attempt'"
CLAIM_SET = (
    "state = 'running', attempts = attempts + 1, visible_at = {now} + {lease}, "
    "lease_token = {token}, worker = {worker}"
)
#: What a worker needs of a job, as queuecore's Job carries it.
RETURNING = "id, kind, payload, queue, priority, attempts, max_attempts, visible_at"
COMPLETE = (
    "UPDATE queuecore_jobs SET state = 'done', finished_at = {now}, lease_token = NULL "
    "WHERE id = {id} AND lease_token = {token} AND state = 'running'"
)

#: A claimed job as the floors hand it out: its RETURNING columns, then the lease token.
Claimed = tuple[Any, ...]


class SQLiteFloor:
    """Raw `sqlite3`: the claim is BEGIN IMMEDIATE, retire, claim, COMMIT; a complete is
    one statement in autocommit (which takes the write lock at its start)."""

    retire = (
        "UPDATE queuecore_jobs SET state = 'dead', finished_at = ?, lease_token = NULL, "
        f"last_error = {LAST_ATTEMPT} WHERE id IN (SELECT id FROM queuecore_jobs "
        f"WHERE {RETIRE_WHERE.format(now='?')})"
    )
    claim_one = (
        f"UPDATE queuecore_jobs SET {CLAIM_SET.format(now='?', lease='?', token='?', worker='?')} "
        f"WHERE id = (SELECT id FROM queuecore_jobs WHERE {READY_WHERE.format(now='?')} "
        f"{ORDER} LIMIT 1) RETURNING {RETURNING}"
    )
    pick = f"SELECT id FROM queuecore_jobs WHERE {READY_WHERE.format(now='?')} {ORDER} LIMIT ?"
    complete_sql = COMPLETE.format(now="?", id="?", token="?")

    def __init__(self, path: str, *, synchronous: str, lease_seconds: float = 30.0) -> None:
        self.lease_seconds = lease_seconds
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.conn.execute("PRAGMA busy_timeout = 30000")
        # Switching to WAL can answer "locked" at once (no busy wait) while another
        # connection opens the file: retry, as any real implementation must.
        for attempt in range(100):
            try:
                self.conn.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError:
                if attempt == 99:
                    raise
                time.sleep(0.01)
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")

    def claim(self, worker: str, limit: int) -> list[Claimed]:
        now = time.time()
        token = secrets.token_hex(16)
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(self.retire, (now, now))
            if limit == 1:
                rows = cur.execute(
                    self.claim_one, (now, self.lease_seconds, token, worker, now)
                ).fetchall()
            else:
                ids = [row[0] for row in cur.execute(self.pick, (now, limit))]
                marks = ", ".join("?" * len(ids))
                sql = (
                    f"UPDATE queuecore_jobs SET "
                    f"{CLAIM_SET.format(now='?', lease='?', token='?', worker='?')} "
                    f"WHERE id IN ({marks}) RETURNING {RETURNING}"
                )
                by_id = {
                    row[0]: row
                    for row in cur.execute(sql, (now, self.lease_seconds, token, worker, *ids))
                }
                rows = [by_id[i] for i in ids]
            cur.execute("COMMIT")
        except BaseException:
            self.conn.rollback()
            raise
        return [(r[0], r[1], json.loads(r[2]), *r[3:], token) for r in rows]

    def complete(self, job_id: int, token: str) -> bool:
        return self.conn.execute(self.complete_sql, (time.time(), job_id, token)).rowcount == 1

    def close(self) -> None:
        self.conn.close()


class SQLiteOneStatementFloor(SQLiteFloor):
    """R08 as amended: the dead state written lazily. A one-job claim is one autocommit
    statement that takes the first live row whose time has come; a row met with its lease
    over on its last attempt is written dead there (the CASEs) and not handed out, and the
    claim looks again. Many-job claims are the parent's."""

    lost = "state = 'running' AND attempts >= max_attempts"
    claim_lazy = (
        "UPDATE queuecore_jobs SET "
        f"state = CASE WHEN {lost} THEN 'dead' ELSE 'running' END, "
        f"attempts = CASE WHEN {lost} THEN attempts ELSE attempts + 1 END, "
        f"finished_at = CASE WHEN {lost} THEN visible_at ELSE finished_at END, "
        f"last_error = CASE WHEN {lost} THEN {LAST_ATTEMPT} ELSE last_error END, "
        f"lease_token = CASE WHEN {lost} THEN NULL ELSE ?2 END, "
        f"worker = CASE WHEN {lost} THEN worker ELSE ?3 END, "
        f"visible_at = CASE WHEN {lost} THEN visible_at ELSE ?1 + ?4 END "
        "WHERE id = (SELECT id FROM queuecore_jobs WHERE state IN ('queued', 'running') "
        f"AND visible_at <= ?1 {ORDER} LIMIT 1) RETURNING {RETURNING}, state"
    )

    def claim(self, worker: str, limit: int) -> list[Claimed]:
        if limit > 1:
            return super().claim(worker, limit)
        token = secrets.token_hex(16)
        while True:
            # Every row fetched: an UPDATE ... RETURNING not read to its end holds the lock.
            rows = self.conn.execute(
                self.claim_lazy, (time.time(), token, worker, self.lease_seconds)
            ).fetchall()
            if not rows:
                return []
            row = rows[0]
            if row[-1] == "running":
                return [(row[0], row[1], json.loads(row[2]), *row[3:-1], token)]


class PostgresFloor:
    """Raw psycopg in autocommit: the claim is one statement (the retire step as a
    data-modifying CTE, the pick with FOR UPDATE SKIP LOCKED), a complete is another."""

    now = "extract(epoch FROM clock_timestamp())::float8"
    retire = (
        "UPDATE queuecore_jobs SET state = 'dead', finished_at = {now}, lease_token = NULL, "
        f"last_error = {LAST_ATTEMPT} WHERE id IN (SELECT id FROM queuecore_jobs "
        f"WHERE {RETIRE_WHERE} FOR UPDATE SKIP LOCKED)"
    ).format(now=now)
    claim_set = CLAIM_SET.format(now=now, lease="%(lease)s", token="%(token)s", worker="%(worker)s")
    claim_one = (
        f"WITH retired AS ({retire}) UPDATE queuecore_jobs SET {claim_set} "
        f"WHERE id = (SELECT id FROM queuecore_jobs WHERE {READY_WHERE.format(now=now)} "
        f"{ORDER} LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING {RETURNING}"
    )
    claim_many = (
        f"WITH retired AS ({retire}) UPDATE queuecore_jobs SET {claim_set} "
        f"FROM (SELECT id, visible_at FROM queuecore_jobs WHERE {READY_WHERE.format(now=now)} "
        f"{ORDER} LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS picked "
        "WHERE queuecore_jobs.id = picked.id "
        f"RETURNING {', '.join('queuecore_jobs.' + c for c in RETURNING.split(', '))}, "
        "picked.visible_at"
    )
    complete_sql = COMPLETE.format(now=now, id="%s", token="%s")

    def __init__(self, dsn: str, *, lease_seconds: float = 30.0) -> None:
        import psycopg

        self.lease_seconds = lease_seconds
        self.conn = psycopg.connect(dsn, autocommit=True)

    def claim(self, worker: str, limit: int) -> list[Claimed]:
        token = secrets.token_hex(16)
        params = {"lease": self.lease_seconds, "token": token, "worker": worker, "limit": limit}
        if limit == 1:
            return [(*r, token) for r in self.conn.execute(self.claim_one, params)]
        rows = self.conn.execute(self.claim_many, params).fetchall()
        rows.sort(key=lambda r: (r[4], r[8], r[0]))  # priority, pre-claim visible_at, id
        return [(*r[:8], token) for r in rows]

    def complete(self, job_id: int, token: str) -> bool:
        return self.conn.execute(self.complete_sql, (job_id, token)).rowcount == 1

    def close(self) -> None:
        self.conn.close()
