"""The command line's log handler writes the lines an ack window holds together in one
write, in the order they were logged, and nothing it holds is lost or reordered."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from queuecore.observe.worklog import LineHandler, SafeFormatter, lines_together


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
