"""The MariaDB facts ADR 0012 rests on, checked on the server at hand rather than taken
from the manual: dedupe without losing the existing id (R02/R27), what the server
clock reads (R20), the migration lock, and which columns can be keys.

Each probe prints one line: what was tried and what the server did. Run through
`python -m benchmarks.mariadb_drivers`, on connections made by SQLAlchemy's MariaDB
dialect (so the client flags are those the backend will have: CLIENT_FOUND_ROWS on).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks.mariadb_plans import TABLE

UPSERT = (
    f"INSERT INTO {TABLE} (kind, queue, payload, priority, state, attempts, max_attempts, "
    "visible_at, created_at, dedupe_key) VALUES (%s, 'default', '{}', 0, 'queued', 0, 3, "
    "0, 0, 'key-1') ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)"
)


def dedupe(connect: Callable[[], Any]) -> list[str]:
    """ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id): the id of a duplicate comes
    back as `lastrowid`; the affected-row count tells an insert from a duplicate only
    without CLIENT_FOUND_ROWS. INSERT IGNORE: what else it ignores."""
    conn = connect()
    cur = conn.cursor()
    lines = []
    cur.execute(f"DELETE FROM {TABLE}")
    cur.execute(UPSERT, ("first",))
    first = (cur.rowcount, cur.lastrowid)
    cur.execute(UPSERT, ("second",))
    second = (cur.rowcount, cur.lastrowid)
    conn.commit()
    lines.append(
        f"ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id): new row rowcount={first[0]} "
        f"lastrowid={first[1]}; duplicate rowcount={second[0]} lastrowid={second[1]}"
    )
    cur.execute(
        f"INSERT IGNORE INTO {TABLE} (kind, queue, payload, priority, state, attempts, "
        "max_attempts, visible_at, created_at) VALUES (NULL, 'default', '{}', 0, 'queued', "
        "0, 3, 0, 0)"
    )
    ignored = cur.rowcount
    cur.execute("SHOW WARNINGS")
    warnings = [row[2] for row in cur.fetchall()]
    cur.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE kind = ''")
    empty_kinds = cur.fetchone()[0]
    conn.rollback()
    lines.append(
        f"INSERT IGNORE with kind NULL (NOT NULL column, strict mode): rowcount={ignored}, "
        f"rows with kind '' written: {empty_kinds}, warnings: {warnings}"
    )
    lines.append(_savepoint(conn))
    lines.append(_snapshot(connect))
    conn.close()
    return lines


def _savepoint(conn: Any) -> str:
    """The chosen way: a plain INSERT in a savepoint; on a duplicate key (1062) back to
    the savepoint, then read the existing job with a locking read."""
    cur = conn.cursor()
    plain = UPSERT.split(" ON DUPLICATE")[0]
    cur.execute("SAVEPOINT dedupe")
    try:
        cur.execute(plain, ("third",))
        outcome = "inserted (unexpected)"
    except Exception as exc:
        cur.execute("ROLLBACK TO SAVEPOINT dedupe")
        outcome = f"error {exc.args[0]}"
    cur.execute(f"SELECT id, kind FROM {TABLE} WHERE dedupe_key = 'key-1' LOCK IN SHARE MODE")
    found = cur.fetchall()
    cur.execute(f"SELECT COUNT(*) FROM {TABLE}")
    rows = cur.fetchone()[0]
    conn.rollback()
    return (
        f"SAVEPOINT + INSERT of a taken key: {outcome}; then the existing job {found}, "
        f"{rows} row(s) in the table"
    )


def _snapshot(connect: Callable[[], Any]) -> str:
    """A caller's REPEATABLE READ transaction that read before (R03's `conn=`) does not
    see a key another session committed since: a plain SELECT of the existing job finds
    nothing, a locking read (`LOCK IN SHARE MODE`) finds it."""
    mine, other = connect(), connect()
    cur = mine.cursor()
    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    mine.rollback()
    cur.execute(f"SELECT COUNT(*) FROM {TABLE}")  # the snapshot starts here
    cur.fetchall()
    theirs = other.cursor()
    theirs.execute(UPSERT.replace("key-1", "key-2"), ("other",))
    other.commit()
    cur.execute(f"SELECT id FROM {TABLE} WHERE dedupe_key = 'key-2'")
    plain = cur.fetchall()
    cur.execute(f"SELECT id FROM {TABLE} WHERE dedupe_key = 'key-2' LOCK IN SHARE MODE")
    locking = cur.fetchall()
    mine.rollback()
    mine.close()
    other.close()
    return (
        f"REPEATABLE READ, a key committed by another session after the snapshot: plain "
        f"SELECT finds {len(plain)} row(s), LOCK IN SHARE MODE finds {len(locking)}"
    )


def clock(connect: Callable[[], Any]) -> list[str]:
    """UNIX_TIMESTAMP(NOW(6)) against the client's clock, in the server's own time zone
    and in UTC; NOW(6) within one statement and across two in one transaction."""
    conn = connect()
    cur = conn.cursor()
    lines = []
    for zone in ("SYSTEM", "+00:00", "+02:00"):
        cur.execute(f"SET time_zone = '{zone}'")
        before = time.time()
        cur.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
        server = float(cur.fetchone()[0])
        lines.append(
            f"time_zone {zone}: UNIX_TIMESTAMP(NOW(6)) - client time.time() = "
            f"{server - before:+.4f} s"
        )
    cur.execute("SELECT NOW(6), SLEEP(0.05), NOW(6), SYSDATE(6)")
    start, _, end, sysdate = cur.fetchone()
    lines.append(
        f"one statement: NOW(6) twice equal: {start == end}; SYSDATE(6) later: {sysdate > start}"
    )
    cur.execute("SELECT NOW(6)")
    first = cur.fetchone()[0]
    cur.execute("DO SLEEP(0.05)")
    cur.execute("SELECT NOW(6)")
    lines.append(f"two statements, one transaction: NOW(6) moved: {cur.fetchone()[0] > first}")
    conn.rollback()
    conn.close()
    return lines


READY = "live_priority IS NOT NULL AND visible_at <= UNIX_TIMESTAMP(NOW(6))"
ORDER = "ORDER BY live_priority, visible_at, id LIMIT 1"
#: The claim in one locking statement over the live-rows index.
CLAIM_ONE_STEP = f"SELECT id FROM {TABLE} WHERE {READY} {ORDER} FOR UPDATE SKIP LOCKED"
#: The claim in two: the candidates by a plain (consistent, lock-free) read, then locked
#: by primary key with the predicate checked again.
CANDIDATES = f"SELECT id FROM {TABLE} WHERE {READY} {ORDER}"
LOCK_CANDIDATES = f"SELECT id FROM {TABLE} WHERE id IN ({{ids}}) AND {READY} FOR UPDATE SKIP LOCKED"


def _claim(cursor: Any, two_steps: bool) -> list[int]:
    if not two_steps:
        cursor.execute(CLAIM_ONE_STEP)
        return [row[0] for row in cursor.fetchall()]
    cursor.execute(CANDIDATES)
    ids = ", ".join(str(row[0]) for row in cursor.fetchall()) or "NULL"
    cursor.execute(LOCK_CANDIDATES.format(ids=ids))
    return [row[0] for row in cursor.fetchall()]


def skip_locked(connect: Callable[[], Any]) -> list[str]:
    """Two claims at once (R04): the second skips the row the first holds. And a running
    job ahead of the ready ones in the index (priority 0, its lease running), which the
    claim's scan walks past: can its holder heartbeat it while a claim is open? Both
    isolation levels, the claim in one locking statement and in two steps."""
    setup = connect()
    cur = setup.cursor()
    cur.execute(f"DELETE FROM {TABLE}")
    cur.execute(
        f"INSERT INTO {TABLE} (kind, queue, payload, priority, state, attempts, "
        "max_attempts, visible_at, created_at, lease_token) VALUES "
        "('k', 'q', '{}', 0, 'running', 1, 3, UNIX_TIMESTAMP() + 600, 0, 'held'), "
        "('k', 'q', '{}', 1, 'queued', 0, 3, 0, 0, NULL), "
        "('k', 'q', '{}', 1, 'queued', 0, 3, 0, 0, NULL)"
    )
    cur.execute(f"SELECT id FROM {TABLE} WHERE lease_token = 'held'")
    [(running,)] = cur.fetchall()
    setup.commit()
    # As the fence has it: by primary key, then token and state.
    heartbeat = (
        f"UPDATE {TABLE} SET visible_at = UNIX_TIMESTAMP(NOW(6)) + 600 "
        f"WHERE id = {running} AND lease_token = 'held' AND state = 'running'"
    )
    lines = []
    for level in ("READ COMMITTED", "REPEATABLE READ"):
        for two_steps in (False, True):
            first, second, holder = connect(), connect(), connect()
            for conn in (first, second, holder):
                conn.cursor().execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {level}")
                conn.cursor().execute("SET SESSION innodb_lock_wait_timeout = 1")
                conn.rollback()
            held = _claim(first.cursor(), two_steps)
            taken = _claim(second.cursor(), two_steps)
            started = time.monotonic()
            try:
                holder.cursor().execute(heartbeat)
                beat = "went through"
            except Exception as exc:
                beat = f"waited and failed ({exc.args[-1]})"
            waited = time.monotonic() - started
            shape = "two steps" if two_steps else "one statement"
            lines.append(
                f"{level}, claim in {shape}: the first claim takes {held}, the second "
                f"{taken}; the running job's heartbeat meanwhile {beat} after {waited:.1f} s"
            )
            for conn in (first, second, holder):
                conn.rollback()
                conn.close()
    setup.close()
    return lines


def migration_lock(connect: Callable[[], Any]) -> list[str]:
    """GET_LOCK is held by the session, so it outlives the implicit commit every DDL
    statement makes; a second migrator waits (or, with timeout 0, is told)."""
    first, second = connect(), connect()
    one, two = first.cursor(), second.cursor()
    one.execute("SELECT GET_LOCK('queuecore_migrate', 10)")
    got = one.fetchone()[0]
    one.execute("CREATE TABLE qc_probe_ddl (id INT)")  # an implicit commit
    one.execute("DROP TABLE qc_probe_ddl")
    two.execute("SELECT GET_LOCK('queuecore_migrate', 0)")
    blocked = two.fetchone()[0]
    one.execute("SELECT RELEASE_LOCK('queuecore_migrate')")
    two.execute("SELECT GET_LOCK('queuecore_migrate', 0)")
    after = two.fetchone()[0]
    two.execute("SELECT RELEASE_LOCK('queuecore_migrate')")
    first.close()
    second.close()
    return [
        f"GET_LOCK: first session {got}; after two DDL statements a second session gets "
        f"{blocked} (held); after RELEASE_LOCK it gets {after}"
    ]


def keys(connect: Callable[[], Any]) -> list[str]:
    """Which columns can be keys: a plain key (the claim's by-queue key needs one) on
    TEXT is silently cut to a prefix; a UNIQUE key on TEXT, or on VARCHAR past InnoDB's 3,072
    bytes (768 utf8mb4 characters), is accepted but built as a hash ("long unique"),
    not a B-tree."""
    conn = connect()
    cur = conn.cursor()
    lines = []
    for column, key in (
        ("TEXT", "KEY"),
        ("VARCHAR(255)", "KEY"),
        ("TEXT", "UNIQUE KEY"),
        ("VARCHAR(768)", "UNIQUE KEY"),
        ("VARCHAR(769)", "UNIQUE KEY"),
    ):
        try:
            cur.execute(f"CREATE TABLE qc_probe_key (k {column}, {key} ix (k))")
        except Exception as exc:
            lines.append(f"{key} on {column} (utf8mb4): refused: {exc.args[-1]}")
            continue
        cur.execute(
            "SELECT INDEX_TYPE, SUB_PART FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'qc_probe_key'"
        )
        kind, prefix = cur.fetchone()
        made = f"{kind}" + (f" on a {prefix}-character prefix" if prefix else "")
        lines.append(f"{key} on {column} (utf8mb4): accepted, as {made}")
        cur.execute("DROP TABLE qc_probe_key")
    conn.close()
    return lines
