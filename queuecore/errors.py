"""Errors a caller can catch by name, each saying what to do about it."""

from __future__ import annotations


class QueuecoreError(Exception):
    """Base class of every error queuecore raises on purpose."""


class NotMigratedError(QueuecoreError):
    """The database has no queuecore schema, or an older one: run the migrations."""


class SchemaTooNewError(QueuecoreError):
    """The database was migrated by a newer queuecore: refuse rather than corrupt it."""


class DatabaseUnreachableError(QueuecoreError):
    """The DSN names a server or file that cannot be opened."""


class ConnectionLostError(DatabaseUnreachableError):
    """The database connection was lost, and every reconnection the queue tried in the
    next few seconds failed too: the server is down or out of reach. The driver's error is
    the `__cause__`; nothing of the operation was applied."""


class StorageFullError(QueuecoreError):
    """The database has no room left on its disk (or its quota): nothing of the operation
    was applied. Free space on the database's disk; reads still work meanwhile."""


class DeadlockError(QueuecoreError):
    """The database rolled the operation back to break a deadlock (or a lock wait ran
    out) on every try the queue made: nothing of it was applied. Another transaction
    holds the rows long; retrying later is safe."""


class DatabaseLimitError(QueuecoreError):
    """The database refused a value past one of its own limits that R29's checks did not
    cover (a server setting such as MariaDB's max_allowed_packet, below max_payload_bytes):
    nothing was written. Lower the value, or raise the server's limit."""


class UnknownBackendError(QueuecoreError):
    """No installed backend serves the DSN's dialect."""


class DatabaseBusyError(QueuecoreError):
    """SQLite's write lock stayed taken for longer than the busy timeout."""


class OutcomeUnknownError(QueuecoreError):
    """The connection died while a commit was in flight: it may or may not have landed."""


class DedupeConflict(QueuecoreError, ValueError):
    """An enqueue's `dedupe_key` is taken by a job of another kind or payload (R27): the
    key is probably reused by mistake, and returning the other job would hide that.
    `existing_id` is that job's id; nothing was written."""

    def __init__(self, dedupe_key: str, existing_id: int, differs: str) -> None:
        self.dedupe_key = dedupe_key
        self.existing_id = existing_id
        super().__init__(
            f"dedupe_key {dedupe_key!r} already belongs to job {existing_id}, which has "
            f"another {differs}; use a new key for different work"
        )


class SQLiteBuildWarning(UserWarning):
    """The SQLite library in use has a known bug that can corrupt a queue's database."""


class CopyConflictError(QueuecoreError):
    """`copy` found the target holding a different job under an id (or a dedupe key) of
    the source's: copying would overwrite one of them or give one key two jobs."""


class CopyLimitsError(QueuecoreError):
    """`copy` found source jobs past the target's limits (R29: a name too long or holding
    a control character, a payload or result too deep or too large), before writing
    anything. `ids` lists them."""

    def __init__(self, message: str, ids: list[int]) -> None:
        super().__init__(message)
        self.ids = ids


class LiveLeasesError(QueuecoreError):
    """`copy` found jobs running on the source under leases that have not ended."""
