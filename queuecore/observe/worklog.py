"""How the worker names jobs and errors in its log: one line each, never a payload, never
a control character (`queuecore.observe.terminal`), never a DSN's password."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence

from queuecore.core.dsn import scrubbed
from queuecore.handling import Lease
from queuecore.job import Job
from queuecore.observe.terminal import printable, printable_lines

log = logging.getLogger("queuecore.worker")


def label(lease: Lease) -> str:
    """How a job is named in the log: never its payload, which may hold secrets."""
    job = lease.job
    return _named(job, printable(job.kind), printable(job.queue))


def _named(job: Job, kind: str, queue: str) -> str:
    return f"job {job.id} ({kind}, queue {queue}, attempt {job.attempts}/{job.max_attempts})"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc))}"


def first_line(text: str) -> str:
    return printable(text.strip().splitlines()[0]) if text.strip() else ""


#: The command line's log lines, in a worker and in its handler processes alike.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
#: The milliseconds after the time, as `logging.Formatter.default_msec_format`.
MSEC_FORMAT = "%s,%03d"
#: How many (kind, queue) pairs a formatter keeps made safe for the line per job.
NAMES_KEPT = 1024


class _ThisProcess:
    """This process's id, read once and again after a fork: `os.getpid()` is a system
    call, 1.8 µs on a virtual machine, and `SafeFormatter.line` runs once per job."""

    pid = os.getpid()

    @classmethod
    def forked(cls) -> None:
        cls.pid = os.getpid()


_this_process = _ThisProcess
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ThisProcess.forked)


class _Stamp:
    """What `SafeFormatter.formatTime` reads of a record: when it was made."""

    __slots__ = ("created", "msecs")

    def __init__(self, created: float) -> None:
        self.created = created
        self.msecs = int((created - int(created)) * 1000) + 0.0


class SafeFormatter(logging.Formatter):
    """The command line's log lines: each message on one line with its control characters
    escaped, and no secret of the DSN (a driver's message may quote part of one)."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        super().__init__(LOG_FORMAT)
        self.secrets = list(secrets)
        self._second: tuple[int, str] = (-1, "")  # the last second formatted, as text
        self._names: dict[tuple[str, str], tuple[str, str]] = {}  # made safe, by the raw

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """As logging's, the date and time made once a second: a worker logs a line per
        job, and `strftime` was a third of each line's formatting."""
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        return MSEC_FORMAT % (self._second[1], record.msecs)

    def job_lines(
        self, created: float, level: int, name: str, said: Sequence[tuple[Job, str]]
    ) -> list[str]:
        """What `format` makes of a record of each job's `label` and its `tail` (text the
        worker wrote, with no secret and no control character in it), all at `created`:
        LOG_FORMAT's fields, made here for `LineHandler.say_jobs`. Only a job's kind and
        queue need making safe, and they are the same for many jobs, so each pair is made
        safe once: hiding the secrets in the whole line was most of its cost."""
        start = self._line(created, level, name, "")
        lines = []
        for job, tail in said:
            names = self._names.get((job.kind, job.queue))
            if names is None:
                if len(self._names) >= NAMES_KEPT:
                    self._names.clear()
                names = self._names[(job.kind, job.queue)] = (
                    self._safe(job.kind),
                    self._safe(job.queue),
                )
            lines.append(f"{start}{_named(job, *names)} {tail}")
        return lines

    def _safe(self, text: str) -> str:
        return printable(scrubbed(text, self.secrets))

    def _line(self, created: float, level: int, name: str, message: str) -> str:
        record = _Stamp(created)
        level_name = logging.getLevelName(level)
        return f"{self.formatTime(record)} {level_name} {name}[{_this_process.pid}]: {message}"  # type: ignore[arg-type]

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(scrubbed(record.message, self.secrets))
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:
        return printable_lines(scrubbed(super().formatException(ei), self.secrets))  # type: ignore[arg-type]


class _Held(threading.local):
    """The lines `lines_together` holds back on one thread, by the handler to write them."""

    def __init__(self) -> None:
        self.depth = 0
        self.lines: dict[LineHandler, list[str]] = {}


_held = _Held()


@contextlib.contextmanager
def lines_together() -> Iterator[None]:
    """The lines below WARNING this thread logs meanwhile through the command line's
    handler (`LineHandler`) are written at the end, in one write: the worker's ack
    window logs a line per job it completed, and a write (a system call, the GIL let go
    and taken back) for each was a fifth of that thread's time. Any other handler gets
    each record as it is logged; a WARNING or worse writes what was held, then itself."""
    _held.depth += 1
    try:
        yield
    finally:
        _held.depth -= 1
        if _held.depth == 0:
            held, _held.lines = _held.lines, {}
            for handler, lines in held.items():
                handler.write_held(lines)


def jobs_info(said: Sequence[tuple[Lease, str]]) -> None:
    """`log.info("%s %s", label(lease), tail)` for each of the worker's lines per job,
    where `tail` is text the worker wrote itself (no secret, no control character).
    Where the command line's handler is all the records would reach (no filter on
    their way, no other handler), the lines are made as that handler formats a record,
    from one reading of the clock: the records, a third of a line's cost, are never
    made, and the time is formatted once for an ack window's flush, not once a job."""
    if not said or not log.isEnabledFor(logging.INFO):
        return
    handler = _sole_line_handler()
    if handler is None:
        for lease, tail in said:
            log.info("%s %s", label(lease), tail)
    else:
        handler.say_jobs(logging.INFO, [(lease.job, tail) for lease, tail in said])


def _sole_line_handler() -> LineHandler | None:
    """The one `LineHandler` (with its `SafeFormatter`) an INFO record of `log` would
    reach, if nothing else would see it (a filter, another handler); else None."""
    found: LineHandler | None = None
    logger: logging.Logger | None = log
    while logger is not None:
        if logger.filters:
            return None
        for handler in logger.handlers:
            if (
                found is not None
                or type(handler) is not LineHandler
                or type(handler.formatter) is not SafeFormatter
                or handler.filters
                or handler.level > logging.INFO
            ):
                return None
            found = handler
        logger = logger.parent if logger.propagate else None
    return found


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The command line's handler: a `StreamHandler` that writes the lines held by
    `lines_together` in one write."""

    def emit(self, record: logging.LogRecord) -> None:
        if _held.depth:
            held = _held.lines.setdefault(self, [])
            if record.levelno < logging.WARNING:
                try:
                    held.append(self.format(record))
                except Exception:
                    self.handleError(record)
                return
            self.write_held(held)
            held.clear()
        super().emit(record)

    def say_jobs(self, level: int, said: Sequence[tuple[Job, str]]) -> None:
        """Lines of `log`'s at `level`, as `emit` would write records of each job's
        `label` and its tail."""
        assert isinstance(self.formatter, SafeFormatter)
        self._said(self.formatter.job_lines(time.time(), level, log.name, said))

    def _said(self, lines: list[str]) -> None:
        if _held.depth:
            _held.lines.setdefault(self, []).extend(lines)
        else:
            self.write_held(lines)

    def write_held(self, lines: list[str]) -> None:
        if not lines:
            return
        with self.lock or contextlib.nullcontext():
            try:
                self.stream.write("".join(line + self.terminator for line in lines))
                self.flush()
            except Exception:
                self.handleError(logging.makeLogRecord({"msg": lines[-1], "name": log.name}))


def configure_logging(level: str | int, secrets: Sequence[str] = ()) -> None:
    """`logging.basicConfig` with `SafeFormatter`, for a worker and its handler processes."""
    handler = LineHandler()
    handler.setFormatter(SafeFormatter(secrets))
    logging.basicConfig(level=level, handlers=[handler])
