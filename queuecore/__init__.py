"""queuecore: a durable job queue on SQLAlchemy, on SQLite or PostgreSQL."""

from queuecore.connect import connect
from queuecore.errors import (
    DatabaseBusyError,
    DatabaseUnreachableError,
    NotMigratedError,
    OutcomeUnknownError,
    QueuecoreError,
    SchemaTooNewError,
    SQLiteBuildWarning,
    UnknownBackendError,
)
from queuecore.job import EnqueueResult, Job, JobSnapshot
from queuecore.migrate import migrate
from queuecore.protocol import Effect, Queue

__all__ = [
    "DatabaseBusyError",
    "DatabaseUnreachableError",
    "Effect",
    "EnqueueResult",
    "Job",
    "JobSnapshot",
    "NotMigratedError",
    "OutcomeUnknownError",
    "Queue",
    "QueuecoreError",
    "SQLiteBuildWarning",
    "SchemaTooNewError",
    "UnknownBackendError",
    "connect",
    "migrate",
]
