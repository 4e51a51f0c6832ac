"""What both kinds of slot do alike, on the worker's side of a handler process
(`queuecore.worker.processes.handler_slot`) or of the event-loop process
(`queuecore.worker.processes.loop_slot`): how far ahead a child is kept, how often a
slot looks up from its socket, how jobs are sent so that one that cannot be (W10) fails
alone, what a job's error says when its child died under it (W7), and how long a child
killed at the worker's exit is waited for (W4)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Callable

from queuecore.handling import Crashed, Raised
from queuecore.job import Job
from queuecore.observe.worklog import describe
from queuecore.worker.processes.handler_processes import exit_text
from queuecore.worker.processes.messages import Jobs, Message

#: Jobs a child holds beyond those it runs: one, so that it never waits between two
#: jobs, and, while its handlers are short, up to AHEAD_MOST, about AHEAD_SECONDS of
#: work, so that several jobs share a message. Never many: a job sent to a child is one
#: that another free slot cannot take while a long handler runs (a crash gives it back
#: uncharged, as any job not started).
AHEAD_SECONDS = 0.01
AHEAD_MOST = 16
WATCH_SLICE = 0.1  # the longest wait for a message before leases and stop are looked at
#: How long a worker exiting past its grace waits for each child it killed to have
#: died (W4): a process in the middle of its exit takes no longer than this.
ABANDON_WAIT = 5.0


#: What a job's handler process was doing when it died (W7), as the job's error says:
#: its handler, or the effect it returned, committed with the completion in the child.
RUNNING_HANDLER = "the handler"
COMMITTING_EFFECT = "the handler's effect (the completion did not commit)"


def died_while(pid: int, code: int, doing: str) -> Crashed:
    """The outcome of a job whose handler process died under it, naming the exit."""
    return Crashed(f"its handler process (pid {pid}) {exit_text(code)} while running {doing}")


def jobs_ahead(handler_seconds: float | None) -> int:
    """How many jobs to keep a child ahead, for handlers that ran `handler_seconds` on
    average (None: not known yet)."""
    if handler_seconds is None:
        return 1
    return max(1, min(AHEAD_MOST, int(AHEAD_SECONDS / max(handler_seconds, 1e-6))))


def undeliverable(exc: BaseException) -> Raised:
    """The outcome of a job that cannot be handed to a handler process (W10)."""
    return Raised(
        f"the job cannot be sent to its handler process ({describe(exc)}); its payload is the cause"
    )


def abandon_child(pid: int) -> None:
    """SIGKILL a child (the fork server's, which the worker cannot reap) as the worker
    exits past its grace (W4), and wait up to ABANDON_WAIT for its death, where the
    system can tell (Linux's pidfd: a dead process counts even before it is reaped), so
    that a worker which exits leaves no handler of its own running."""
    if not hasattr(os, "pidfd_open"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # gone already
        return
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        select.select([fd], [], [], ABANDON_WAIT)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


def send_jobs(
    send: Callable[[Message], None],
    jobs: list[tuple[int, Job]],
    refused: Callable[[int, Raised], None],
) -> None:
    """Send the jobs, by ticket, in one message; when that cannot be pickled (W10: a
    payload nested too deep, say), one by one, and hand each that cannot go at all to
    `refused` with the outcome that says why, so that it fails alone. A pickling error
    leaves nothing on the socket (it pickles first); a dead socket's error (EOFError,
    OSError) is the caller's."""
    try:
        send(Jobs(jobs))
        return
    except (EOFError, OSError):
        raise
    except Exception:  # each job is tried alone below
        pass
    for ticket, job in jobs:
        try:
            send(Jobs([(ticket, job)]))
        except (EOFError, OSError):
            raise
        except Exception as exc:
            refused(ticket, undeliverable(exc))
