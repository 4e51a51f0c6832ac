"""What the worker, its fork server and both kinds of handler process share: the words
of memory in which a handler process says which job it runs (and which jobs returned
while their outcomes wait to be sent), and the worker's pid."""

from __future__ import annotations

import logging
import mmap
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
#: After it, the jobs that returned in a handler process while their outcomes wait
#: there to go with the next ones: how many (up to RETURNED_MOST), then their tickets.
#: Once it died, those are given back uncharged, not failed with it (W7): their
#: handlers had returned.
RETURNED_MOST = 8
#: A sync handler that ran less than this, with more jobs waiting in its process, has
#: its outcome held there to go with the next ones; a longer one's goes at once.
HOLD_SECONDS = 0.001
_COUNT = struct.Struct("q")
_TICKET = struct.Struct("q")
SHARED_SIZE = RUNNING.size + _COUNT.size + RETURNED_MOST * _TICKET.size


def shared_word() -> int:
    """A file of SHARED_SIZE zero bytes, open, in memory where the system allows, for
    a handler process and its worker to map."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("queuecore-running")
    else:
        fd, path = tempfile.mkstemp(prefix="queuecore-running-")
        os.unlink(path)
    os.ftruncate(fd, SHARED_SIZE)
    return fd


def note_returned(shared: mmap.mmap, index: int, ticket: int) -> None:
    """The child: the `index`th job whose outcome waits to be sent returned (its ticket
    first, then the count: a death between the two charges the job, as before)."""
    _TICKET.pack_into(shared, RUNNING.size + _COUNT.size + index * _TICKET.size, ticket)
    _COUNT.pack_into(shared, RUNNING.size, index + 1)


def outcomes_sent(shared: mmap.mmap) -> None:
    """The child: every outcome noted returned was sent."""
    _COUNT.pack_into(shared, RUNNING.size, 0)


def returned_unsent(shared: mmap.mmap) -> set[int]:
    """The worker, once the child died: the tickets of the jobs that had returned there
    whose outcomes it had not sent."""
    (count,) = _COUNT.unpack_from(shared, RUNNING.size)
    at = RUNNING.size + _COUNT.size
    return {_TICKET.unpack_from(shared, at + i * _TICKET.size)[0] for i in range(count)}
