"""`queuecore copy`: move every job from one database to another, whatever the backends
(ADR 0009). Written over the columns of `schema.jobs`, so a column a migration adds is
copied without a change here.

Each batch is one transaction on the target and inserts with ON CONFLICT (id) DO NOTHING:
a second run, or one started again after an interruption, writes only what is missing.
A job already on the target is never overwritten: once copied, the target is its truth.

Both sides may take new jobs between the first copy and the last (R35): the target's ids
are moved past the source's by `reserve_ids` before any row is written, so the source's
next ids and the target's never meet, and a later copy moves the source's new jobs with
their own ids. A copy killed at any point leaves a target whose next enqueue works.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import URL, Connection, Engine, exc, func, insert, select

from queuecore.connect import connect
from queuecore.contract import backend_for
from queuecore.core import validate
from queuecore.errors import CopyConflictError, CopyLimitsError, LiveLeasesError
from queuecore.executors.reconnect import give_up
from queuecore.sql.schema import RUNNING, jobs

LiveLeases = Literal["refuse", "keep"]
#: Ids left to the source after a copy, for what it enqueues until the last copy: the
#: target's next id is this far above the source's last. Ids are 64-bit; a million is
#: days of a busy application's jobs, and costs nothing but the gap.
RESERVE_IDS = 1_000_000
#: What makes two rows the same job: fixed when it was enqueued, never changed after.
IDENTITY = (jobs.c.kind, jobs.c.created_at, jobs.c.payload)


@dataclass(frozen=True)
class CopyReport:
    """`copied` rows were written; `already_there` were on the target from an earlier run."""

    copied: int
    already_there: int
    seconds: float
    next_id: int  # the target's ids now start above this
    #: The source's ids up to `next_id` are left to it: how many it may still hand out
    #: before a later copy must run (its ids above that would meet the target's).
    reserved: int

    @property
    def seen(self) -> int:
        """Every source job the copy went through: copied, or found already there."""
        return self.copied + self.already_there


def copy(
    source: str | URL | Engine,
    target: str | URL | Engine,
    *,
    batch: int = 1000,
    live_leases: LiveLeases = "refuse",
    reserve_ids: int = RESERVE_IDS,
    progress: Callable[[int], None] | None = None,
    **options: Any,
) -> CopyReport:
    """Copy every job of `source` into `target` with its id, state, attempts, lease, times,
    payload, errors and dedupe key. `options` are connect()'s (sqlite_driver, ...), used for
    both. `progress(n)` hears of each batch's n rows. Running jobs under live leases are
    refused unless `live_leases="keep"`: see ADR 0009 for why and what "keep" promises.
    The target's next id goes `reserve_ids` past the source's last, before any row is
    written: the source may go on taking that many new jobs until the next copy."""
    batch = validate.at_least("batch", batch, 1)
    reserve_ids = validate.at_least("reserve_ids", reserve_ids, 0)
    if live_leases not in ("refuse", "keep"):
        raise ValueError(f"live_leases must be 'refuse' or 'keep', got {live_leases!r}")
    started = time.monotonic()
    with connect(source, **options) as src, connect(target, **options) as dst:
        if _same_database(src.engine, dst.engine):
            raise ValueError("the source and the target are the same database")
        if live_leases == "refuse":
            _refuse_live_leases(src)
        reader = src.engine.execution_options(queuecore_read_only=True)
        _refuse_different_jobs(reader, dst.engine, batch)
        _refuse_rows_past_limits(reader, dst, batch)
        _reserve_ids(reader, dst.engine, reserve_ids)
        copied = seen = 0
        for rows in _batches(reader, batch):
            try:
                with dst.engine.begin() as conn:
                    copied += _insert(dst, conn, rows)
            except exc.IntegrityError as error:  # rolled back: now say which key clashed
                raise _dedupe_conflict(dst, rows) from error
            except exc.DBAPIError as error:  # a full disk, say (R30)
                give_up(error, dst, "copy")
            seen += len(rows)
            if progress is not None:
                progress(len(rows))
        # Again: the source may have handed out more ids while its rows were copied.
        last, next_id = _reserve_ids(reader, dst.engine, reserve_ids)
        _refresh_statistics(dst)
    return CopyReport(copied, seen - copied, time.monotonic() - started, next_id, next_id - last)


def count(source: str | URL | Engine, **options: Any) -> int:
    """How many jobs a copy of `source` will go through (for a progress bar's total)."""
    with connect(source, **options) as src, src.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(jobs)).scalar_one())


def _same_database(a: Engine, b: Engine) -> bool:
    return a.url.render_as_string(hide_password=False) == b.url.render_as_string(
        hide_password=False
    )


def _refuse_live_leases(src: Any) -> None:
    """A job running on the source under a live lease may still be in its handler: copied,
    the target would hand it out too, and it could run twice at once."""
    now = src.now()
    live = (jobs.c.state == RUNNING) & (jobs.c.visible_at > now)
    with src.engine.connect() as conn:
        held, last_end = conn.execute(
            select(func.count(), func.max(jobs.c.visible_at)).where(live)
        ).one()
    if held:
        raise LiveLeasesError(
            f"{held} job(s) are running on the source under leases that end within "
            f"{last_end - now:.0f}s: stop the source's workers (SIGTERM) and copy once they "
            "have exited; a lease whose worker was killed ends by itself. If their holders "
            "are gone for good, --live-leases keep (live_leases='keep') copies them with "
            "their leases: the target hands them out when those end."
        )


def _batches(reader: Engine, size: int) -> Iterator[list[dict[str, Any]]]:
    """Every row of the source in id order, `size` at a time, each batch read afresh (keyset),
    so jobs enqueued on the source while the copy runs are copied too."""
    after = None
    while True:
        query = select(*jobs.c).order_by(jobs.c.id).limit(size)
        if after is not None:
            query = query.where(jobs.c.id > after)
        with reader.connect() as conn:
            rows = [dict(row._mapping) for row in conn.execute(query)]
        if not rows:
            return
        yield rows
        after = rows[-1]["id"]


def _refuse_rows_past_limits(reader: Engine, dst: Any, size: int) -> None:
    """Before anything is written: every source row within the target's limits (R29). A
    database written by an older queuecore, or by hand, may hold a name or payload the
    target cannot: found half-way, the copy would stop at the same row on every run."""
    unfit: dict[int, str] = {}
    for rows in _batches(reader, size):
        for row in rows:
            reason = _past_limits(row, dst.max_payload_bytes, dst.max_result_bytes)
            if reason is not None:
                unfit[row["id"]] = reason
    if unfit:
        shown = "; ".join(f"job {job_id}: {why}" for job_id, why in list(unfit.items())[:5])
        raise CopyLimitsError(
            f"{len(unfit)} job(s) of the source do not fit the target's limits, nothing was "
            f"copied: ids {sorted(unfit)[:100]} ({shown}). Mend or purge them on the source "
            "first.",
            sorted(unfit),
        )


def _past_limits(
    row: Mapping[str, Any], max_payload_bytes: int, max_result_bytes: int
) -> str | None:
    """Why a stored row does not fit R29's limits, or None."""
    try:
        for name in ("kind", "queue", "dedupe_key", "worker"):
            if name in ("kind", "queue") or row[name] is not None:
                validate.text(name, row[name])
        validate.payload(row["payload"], max_bytes=max_payload_bytes)
        if row["result"] is not None:
            validate.result(row["result"], max_bytes=max_result_bytes)
    except (TypeError, ValueError) as exc:
        return str(exc)[:200]
    return None


def _refresh_statistics(dst: Any) -> None:
    """The target's planner learns of the rows it was given (`Backend.refresh_statistics`):
    a swap with a backlog would otherwise start on claims planned for an empty table."""
    refresh = dst.backend.refresh_statistics()
    if refresh is not None:
        with dst.engine.begin() as conn:
            conn.execute(refresh)


def _insert(dst: Any, conn: Connection, rows: list[dict[str, Any]]) -> int:
    """The batch's rows not yet on the target; returns how many that was. A plain
    executemany (no RETURNING) lets the driver send one prepared statement per row
    instead of one huge statement that psycopg must parse per batch (3-4x faster)."""
    ids = [row["id"] for row in rows]
    present = set(conn.execute(select(jobs.c.id).where(jobs.c.id.in_(ids))).scalars())
    missing = [row for row in rows if row["id"] not in present]
    if missing:  # the target is idle while it is copied into: no other writer races this
        conn.execute(insert(jobs), missing)
    return len(missing)


def _dedupe_conflict(dst: Any, rows: list[dict[str, Any]]) -> CopyConflictError:
    """The only unique key besides the id is the dedupe key: say which job holds it."""
    wanted = {row["dedupe_key"]: row["id"] for row in rows if row["dedupe_key"] is not None}
    with dst.engine.connect() as conn:
        held = conn.execute(
            select(jobs.c.id, jobs.c.dedupe_key).where(jobs.c.dedupe_key.in_(list(wanted)))
        ).all()
    clashes = [(key, job_id, wanted[key]) for job_id, key in held if job_id != wanted[key]]
    shown = "; ".join(
        f"key {key!r} is job {there} on the target, job {here} on the source"
        for key, there, here in clashes[:5]
    )
    return CopyConflictError(
        f"the target already holds other jobs under dedupe keys of the source's ({shown}); "
        "nothing of this batch was written. Copy into a database that holds only jobs of "
        "this source."
    )


def _refuse_different_jobs(reader: Engine, target: Engine, size: int) -> None:
    """Before anything is written: every id the target shares with the source must be the
    same job there (the same kind, creation time and payload)."""
    with reader.connect() as conn:
        low, high = conn.execute(select(func.min(jobs.c.id), func.max(jobs.c.id))).one()
    if low is None:
        return
    after = low - 1
    while True:
        with target.connect() as conn:
            theirs = conn.execute(
                select(jobs.c.id, *IDENTITY)
                .where(jobs.c.id > after, jobs.c.id <= high)
                .order_by(jobs.c.id)
                .limit(size)
            ).all()
        if not theirs:
            return
        with reader.connect() as conn:
            ours = _by_id(
                conn.execute(
                    select(jobs.c.id, *IDENTITY).where(jobs.c.id.in_([r[0] for r in theirs]))
                ).all()
            )
        different = [row[0] for row in theirs if row[0] in ours and ours[row[0]] != tuple(row[1:])]
        if different:
            raise CopyConflictError(
                f"the target holds different jobs under ids the source uses ({different[:10]}); "
                "nothing was copied. Copy into an empty database, or the one an earlier copy "
                "of this source filled; after a copy the source may hand out only the ids it "
                "reserved for it (reserve_ids, --reserve-ids) before the next one."
            )
        after = theirs[-1][0]


def _by_id(rows: Sequence[Any]) -> Mapping[int, tuple[Any, ...]]:
    return {row[0]: tuple(row[1:]) for row in rows}


def _reserve_ids(source: Engine, target: Engine, reserve: int) -> tuple[int, int]:
    """Move the target's next id `reserve` past the last id the source handed out
    (purged ones included), never back; returns (that last id, the target's last id)."""
    with source.connect() as conn:
        last = max(backend_for(source.url).id_sequence(conn), _max_id(conn))
    target_backend = backend_for(target.url)
    with target.begin() as conn:
        target_backend.advance_id_sequence(conn, last + reserve)
        return last, target_backend.id_sequence(conn)


def _max_id(conn: Connection) -> int:
    return int(conn.execute(select(func.max(jobs.c.id))).scalar() or 0)
