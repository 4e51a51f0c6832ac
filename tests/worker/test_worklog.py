"""The command line's log handler writes the lines an ack window holds together in one
write, in the order they were logged, and nothing it holds is lost or reordered."""

from __future__ import annotations

import io
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from queuecore.handling import Lease, Returned
from queuecore.job import Job, to_datetime
from queuecore.observe import worklog
from queuecore.observe.observer import NO_OBSERVER
from queuecore.observe.worklog import LineHandler, SafeFormatter, label, lines_together, log
from queuecore.worker.holdings import Holdings
from queuecore.worker.reporter import Reporter


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


def _lease(job_id: int, kind: str, queue: str = "default") -> Lease:
    return Lease(Job(job_id, kind, {}, queue, 0, 1, 3, "t", to_datetime(1_800_000_000.0)))


def test_a_line_per_job_made_without_a_record_reads_as_the_record_would():
    """`worklog.jobs_info` makes the lines itself where only the command line's handler
    would see the record: the same line, the DSN's secret hidden and control characters
    escaped in a kind or queue name, each pair made safe once and still safe after."""
    made: list[logging.LogRecord] = []

    def make_record(*args: object, **kwargs: object) -> logging.LogRecord:
        made.append(logging.Logger.makeRecord(log, *args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    leases = [
        _lease(1, "noop \x1b[2J hunter2", queue="q\nhunter2"),
        _lease(2, "noop \x1b[2J hunter2", queue="q\nhunter2"),  # the same names again
        _lease(3, "mail"),
    ]
    with worker_log() as stream:
        log.makeRecord = make_record  # type: ignore[method-assign]
        try:
            worklog.jobs_info([(lease, "done in 0.001s") for lease in leases[:2]])
            worklog.jobs_info([(leases[2], "done in 0.001s")])
            assert made == []  # no record was made for them
            for lease in leases:
                log.info("%s %s", label(lease), "done in 0.001s")
        finally:
            del log.makeRecord
    lines = stream.getvalue().splitlines()
    fast, slow = lines[:3], lines[3:]
    assert [_after_the_time(line) for line in fast] == [_after_the_time(line) for line in slow]
    assert "hunter2" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    assert "INFO queuecore.worker[" in fast[0] and "job 3 (mail, queue default" in fast[2]


def test_another_handler_gets_the_line_per_job_as_a_record():
    seen: list[logging.LogRecord] = []
    other = logging.Handler()
    other.emit = seen.append  # type: ignore[method-assign]
    with worker_log() as stream, lines_together():
        log.addHandler(other)
        worklog.jobs_info([(_lease(2, "noop"), "done")])
    said = "job 2 (noop, queue default, attempt 1/3) done"
    assert [r.getMessage() for r in seen] == [said]
    assert _messages(stream) == [said]


def test_a_line_made_in_a_forked_process_names_that_process():
    """The process id in the line is read once per process: a handler process forked
    from the worker must not go on naming the worker."""
    job = _lease(1, "noop").job
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its line, then out at once
        (line,) = SafeFormatter().job_lines(time.time(), logging.INFO, "w", [(job, "hi")])
        os.write(write, line.encode())
        os._exit(0)
    os.close(write)
    line = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert f"INFO w[{pid}]: job 1 (noop, queue default, attempt 1/3) hi" in line
    (here,) = SafeFormatter().job_lines(time.time(), logging.INFO, "w", [(job, "hi")])
    assert f"[{os.getpid()}]" in here


def test_a_flush_says_each_job_in_order_a_refused_one_between_those_done(queue):
    """The lines of an ack window's flush are made together, yet read in the batch's
    order: a job whose completion was refused (cancelled while it ran) is said between
    the jobs done before and after it."""
    ids = [queue.enqueue("note", {}, priority=i).id for i in range(3)]
    holdings = Holdings()
    holdings.hand_out(queue.claim("w", limit=3))
    leases = holdings.take(3, wait=False)
    assert leases is not None and [lease.job.id for lease in leases] == ids
    assert queue.cancel(ids[1])
    reporter = Reporter(
        queue,
        holdings,
        ack_batch=3,
        ack_seconds=3600.0,
        longest_pause=0.1,
        hurry=threading.Event(),
        observer=NO_OBSERVER,
    )
    with worker_log() as stream:
        reporter.start()
        reporter.report_all([(lease, Returned(), time.monotonic()) for lease in leases])
        reporter.close()
    said = [line.split(": ", 1)[1] for line in stream.getvalue().splitlines()]
    assert [line.split(" (")[0] for line in said] == [f"job {i}" for i in ids]
    assert "done in" in said[0] and "done in" in said[2]
    assert "result discarded" in said[1]
    assert not holdings.leases()
