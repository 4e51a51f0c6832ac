"""The command line's log handler writes the lines an ack window holds together in one
write, in the order they were logged, and nothing it holds is lost or reordered."""

from __future__ import annotations

import io
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from queuecore.observe import worklog
from queuecore.observe.worklog import LineHandler, SafeFormatter, lines_together, log


class CountingStream(io.StringIO):
    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, CountingStream, list[logging.LogRecord]]]:
    stream = CountingStream()
    handler = LineHandler(stream)
    handler.setFormatter(SafeFormatter())
    seen: list[logging.LogRecord] = []
    other = logging.Handler()
    other.emit = seen.append  # type: ignore[method-assign]
    logger = logging.getLogger("tests.worklog")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.handlers = [handler, other]
    yield logger, stream, seen
    logger.handlers = []


def _messages(stream: io.StringIO) -> list[str]:
    return [line.split(": ", 1)[1] for line in stream.getvalue().splitlines()]


def test_lines_held_together_go_out_in_one_write_at_the_end(logged):
    logger, stream, seen = logged
    with lines_together():
        for n in range(50):
            logger.info("job %d done", n)
        assert stream.getvalue() == ""  # held
        assert len(seen) == 50  # any other handler hears each record at once
    assert _messages(stream) == [f"job {n} done" for n in range(50)]
    assert stream.writes == 1


def test_a_warning_writes_what_was_held_then_itself(logged):
    logger, stream, _ = logged
    with lines_together():
        logger.info("first")
        logger.warning("trouble")
        assert _messages(stream) == ["first", "trouble"]
        logger.info("after")
    assert _messages(stream) == ["first", "trouble", "after"]


def test_outside_lines_together_each_line_is_written_as_logged(logged):
    logger, stream, _ = logged
    logger.info("one")
    assert _messages(stream) == ["one"]
    with lines_together(), lines_together():  # nested: written when the outer one ends
        logger.info("two")
    assert _messages(stream) == ["one", "two"]


@contextmanager
def worker_log() -> Iterator[io.StringIO]:
    """The worker's own logger, its lines through the command line's handler only (in
    the test's body: pytest hangs its capturing handlers on it for each phase)."""
    saved = (list(log.handlers), log.propagate, log.level)
    stream = io.StringIO()
    handler = LineHandler(stream)
    handler.setFormatter(SafeFormatter(["hunter2"]))
    log.handlers, log.propagate = [handler], False
    log.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        log.handlers, log.propagate = saved[0], saved[1]
        log.setLevel(saved[2])


def _after_the_time(line: str) -> str:
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", line), line
    return line[24:]


def test_a_line_per_job_made_without_a_record_reads_as_the_record_would():
    """`worklog.info` makes the line itself where only the command line's handler would
    see the record: the same line, the DSN's secret hidden, control characters escaped."""
    made: list[logging.LogRecord] = []

    def make_record(*args: object, **kwargs: object) -> logging.LogRecord:
        made.append(logging.Logger.makeRecord(log, *args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    text = "job 1 (noop, queue default, attempt 1/3) done in 0.001s \x1b[2J hunter2"
    with worker_log() as stream:
        log.makeRecord = make_record  # type: ignore[method-assign]
        try:
            worklog.info(text)
            assert made == []  # no record was made for it
            log.info("%s", text)
        finally:
            del log.makeRecord
    fast, slow = stream.getvalue().splitlines()
    assert _after_the_time(fast) == _after_the_time(slow)
    assert "hunter2" not in fast and "\x1b" not in fast and "INFO queuecore.worker[" in fast


def test_another_handler_gets_the_line_per_job_as_a_record():
    seen: list[logging.LogRecord] = []
    other = logging.Handler()
    other.emit = seen.append  # type: ignore[method-assign]
    with worker_log() as stream, lines_together():
        log.addHandler(other)
        worklog.info("job 2 done")
    assert [r.getMessage() for r in seen] == ["job 2 done"]
    assert _messages(stream) == ["job 2 done"]


def test_a_line_made_in_a_forked_process_names_that_process():
    """The process id in the line is read once per process: a handler process forked
    from the worker must not go on naming the worker."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its line, then out at once
        line = SafeFormatter().line(time.time(), logging.INFO, "queuecore.worker", "hi")
        os.write(write, line.encode())
        os._exit(0)
    os.close(write)
    line = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert f"INFO queuecore.worker[{pid}]: hi" in line
    here = SafeFormatter().line(time.time(), logging.INFO, "queuecore.worker", "hi")
    assert f"[{os.getpid()}]" in here
