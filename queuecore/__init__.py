"""queuecore: a durable job queue on SQLAlchemy, on SQLite, PostgreSQL or MariaDB."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from queuecore.connect import connect, connect_async, sqlite_engine
from queuecore.copying import CopyReport, copy
from queuecore.errors import (
    ConnectionLostError,
    CopyConflictError,
    CopyLimitsError,
    DatabaseBusyError,
    DatabaseLimitError,
    DatabaseUnreachableError,
    DeadlockError,
    DedupeConflict,
    LiveLeasesError,
    NotMigratedError,
    OutcomeUnknownError,
    QueuecoreError,
    SchemaTooNewError,
    SQLiteBuildWarning,
    StorageFullError,
    UnknownBackendError,
)
from queuecore.handling import Done, Handler, Lease, Permanent, Retry, current_lease
from queuecore.job import Completions, EnqueueResult, Job, JobSnapshot, WorkerInfo
from queuecore.migrate import migrate
from queuecore.protocol import AsyncEffect, AsyncQueue, Effect, Listener, Queue
from queuecore.registry import Registry
from queuecore.worker.async_handling import AsyncLease
from queuecore.worker.async_worker import AsyncWorker
from queuecore.worker.processes.handler_processes import HandlerProcesses
from queuecore.worker.worker import Worker

try:
    #: The installed release, as the package metadata says (`queuecore --version`).
    __version__: str = _version("queuecore")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AsyncEffect",
    "AsyncLease",
    "AsyncQueue",
    "AsyncWorker",
    "Completions",
    "ConnectionLostError",
    "CopyConflictError",
    "CopyLimitsError",
    "CopyReport",
    "DatabaseBusyError",
    "DatabaseLimitError",
    "DatabaseUnreachableError",
    "DeadlockError",
    "DedupeConflict",
    "Done",
    "Effect",
    "EnqueueResult",
    "Handler",
    "HandlerProcesses",
    "Job",
    "JobSnapshot",
    "Lease",
    "Listener",
    "LiveLeasesError",
    "NotMigratedError",
    "OutcomeUnknownError",
    "Permanent",
    "Queue",
    "QueuecoreError",
    "Registry",
    "Retry",
    "SQLiteBuildWarning",
    "SchemaTooNewError",
    "StorageFullError",
    "UnknownBackendError",
    "Worker",
    "WorkerInfo",
    "__version__",
    "connect",
    "connect_async",
    "copy",
    "current_lease",
    "migrate",
    "sqlite_engine",
]
