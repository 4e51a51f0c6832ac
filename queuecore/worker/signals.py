"""W4's signals: a worker run on the main thread serves on another, so that the main
thread has nothing to do but wait and receive SIGTERM/SIGINT, and a signal handler can
never interrupt code that holds a lock."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)
SIGNAL_CHECK_SECONDS = 0.2  # how long the main thread waits between looks for a signal


def serve_until_signalled(
    serve: Callable[[], None], on_signal: Callable[[int, FrameType | None], None]
) -> None:
    """Run `serve` on a thread of its own, with `on_signal` handling SIGTERM and SIGINT
    meanwhile; the previous handlers are put back at the end."""
    previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS}
    try:
        server = threading.Thread(target=serve, name="queuecore-claimer")
        server.start()
        # Not one long join(): the kernel may hand SIGTERM to any thread (it does when
        # the process was stopped, say), and Python runs the handler only when the main
        # thread next runs bytecode; a blocked join() would wait for ever.
        while server.is_alive():
            server.join(SIGNAL_CHECK_SECONDS)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
