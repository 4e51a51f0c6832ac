"""queuecore: a durable job queue on SQLAlchemy, on SQLite or PostgreSQL."""

from queuecore.connect import connect
from queuecore.errors import (
    DatabaseUnreachableError,
    NotMigratedError,
    QueuecoreError,
    SchemaTooNewError,
    UnknownBackendError,
)
from queuecore.job import EnqueueResult, Job, JobSnapshot
from queuecore.migrate import migrate
from queuecore.protocol import Effect, Queue

__all__ = [
    "DatabaseUnreachableError",
    "Effect",
    "EnqueueResult",
    "Job",
    "JobSnapshot",
    "NotMigratedError",
    "Queue",
    "QueuecoreError",
    "SchemaTooNewError",
    "UnknownBackendError",
    "connect",
    "migrate",
]
