"""How the worker names jobs and errors in its log: one line each, never a payload, never
a control character (`queuecore.observe.terminal`), never a DSN's password."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from queuecore.core.dsn import scrubbed
from queuecore.handling import Lease
from queuecore.observe.terminal import printable, printable_lines

log = logging.getLogger("queuecore.worker")


def label(lease: Lease) -> str:
    """How a job is named in the log: never its payload, which may hold secrets."""
    job = lease.job
    return printable(
        f"job {job.id} ({job.kind}, queue {job.queue}, attempt {job.attempts}/{job.max_attempts})"
    )


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc))}"


def first_line(text: str) -> str:
    return printable(text.strip().splitlines()[0]) if text.strip() else ""


#: The command line's log lines, in a worker and in its handler processes alike.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
#: The milliseconds after the time, as `logging.Formatter.default_msec_format`.
MSEC_FORMAT = "%s,%03d"


class SafeFormatter(logging.Formatter):
    """The command line's log lines: each message on one line with its control characters
    escaped, and no secret of the DSN (a driver's message may quote part of one)."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        super().__init__(LOG_FORMAT)
        self.secrets = list(secrets)
        self._second: tuple[int, str] = (-1, "")  # the last second formatted, as text

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """As logging's, the date and time made once a second: a worker logs a line per
        job, and `strftime` was a third of each line's formatting."""
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        return MSEC_FORMAT % (self._second[1], record.msecs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(scrubbed(record.message, self.secrets))
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:
        return printable_lines(scrubbed(super().formatException(ei), self.secrets))  # type: ignore[arg-type]


def configure_logging(level: str | int, secrets: Sequence[str] = ()) -> None:
    """`logging.basicConfig` with `SafeFormatter`, for a worker and its handler processes."""
    handler = logging.StreamHandler()
    handler.setFormatter(SafeFormatter(secrets))
    logging.basicConfig(level=level, handlers=[handler])
