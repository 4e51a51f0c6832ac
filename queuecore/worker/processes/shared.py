"""What the worker, its fork server and both kinds of handler process share: the word
of memory in which a handler process says which job it runs, and the worker's pid."""

from __future__ import annotations

import logging
import os
import struct
import tempfile

log = logging.getLogger("queuecore.worker")
_supervisor: int | None = None


def supervisor_pid() -> int | None:
    """The worker process this handler process runs for; None outside a handler process.
    For a handler that must act on its whole worker (e.g. freeze it in a test)."""
    return _supervisor


def remember_supervisor(pid: int) -> None:
    """Called once by the fork server: every process it forks inherits the answer."""
    global _supervisor
    _supervisor = pid


#: The shared word where a handler process writes the number of the job it starts, so
#: its supervisor can tell, once it died, which of the jobs sent to it had started.
RUNNING = struct.Struct("q")


def shared_word() -> int:
    """A file of RUNNING.size zero bytes, open, in memory where the system allows, for
    a handler process and its worker to map."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("queuecore-running")
    else:
        fd, path = tempfile.mkstemp(prefix="queuecore-running-")
        os.unlink(path)
    os.ftruncate(fd, RUNNING.size)
    return fd
