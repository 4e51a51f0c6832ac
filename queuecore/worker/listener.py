"""Being woken (W6): on PostgreSQL, a LISTEN connection turns NOTIFYs of new jobs into
an immediate claim; polling stays the fallback, since a notification is only a hint.
The same connection hears of cancelled jobs, so their handlers learn it at once (W9)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from queuecore.observe.worklog import describe, log
from queuecore.protocol import Listener

LISTEN_PROBE_TIMEOUT = 2.0
LISTEN_SLICE = 0.2


class Wakeups:
    """LISTENs, and LISTENs again on a new connection whenever it is lost, trying every
    poll interval meanwhile (the claimer polls then). A lost LISTEN is said once, not at
    every try, and "listening" again says it is over."""

    def __init__(
        self,
        open_listener: Callable[[], Listener | None],
        *,
        queues: Sequence[str] | None,
        wake: threading.Event,
        finished: threading.Event,
        poll_interval: float,
        cancelled: Callable[[list[int]], None] = lambda ids: None,
    ) -> None:
        self.open_listener = open_listener
        self.queues = queues
        self.wake = wake
        self.finished = finished
        self.poll_interval = poll_interval
        #: Told the ids of the jobs whose cancel was heard (W9).
        self.cancelled = cancelled
        #: True while notifications wake the worker; polling is then only a fallback.
        self.listening = False

    def run(self) -> None:
        said = False  # that LISTEN is lost, since it last worked
        while not self.finished.is_set():
            try:
                listener = self.open_listener()
            except Exception as exc:
                if not said:
                    log.warning("cannot LISTEN for new jobs (%s); polling", describe(exc))
                    said = True
                self.finished.wait(self.poll_interval)
                continue
            if listener is None:
                return  # this database has no notifications: polling it is
            try:
                if not listener.reaches_itself(LISTEN_PROBE_TIMEOUT):
                    say_not_heard(self.poll_interval)
                    return
                self.listening = True
                said = False
                self.wake.set()  # the claimer now waits on notifications, not a short pause
                say_listening(self.poll_interval)
                while not self.finished.is_set():
                    names = listener.wait(LISTEN_SLICE)
                    if any(self.queues is None or n in self.queues for n in names):
                        self.wake.set()
                    heard = listener.cancelled()
                    if heard:
                        self.cancelled(heard)
            except Exception as exc:
                if not said:
                    log.warning("the LISTEN connection failed (%s); polling", describe(exc))
                    said = True
                self.finished.wait(self.poll_interval)
            finally:
                self.listening = False
                listener.close()


def say_not_heard(poll_interval: float) -> None:
    """The self-test failed: polling from now on (both workers say it in these words)."""
    log.warning(
        "a NOTIFY this worker sent did not reach its own LISTEN (is a transaction-mode "
        "pooler such as PgBouncer in between?); it will poll every %.1fs instead",
        poll_interval,
    )


def say_listening(poll_interval: float) -> None:
    """LISTEN works (again): what ends a "LISTEN ... failed" line in the log."""
    log.info("listening for new jobs; polling every %.1fs too", poll_interval)
