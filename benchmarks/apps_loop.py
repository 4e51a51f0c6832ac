"""`python -m benchmarks.apps_loop`: queuecore's best library loop (claim 10, completions
through `complete_many` in an ack window) as a process of its own, gated like the
workers, for the worker benchmark's library-loop column."""

from __future__ import annotations

import os

import queuecore  # noqa: F401  (imported before the gate, as the worker's CLI does)
from benchmarks.gate import dsn, wait_at_gate
from benchmarks.implementations import Target, _queuecore_ack_window

LIMIT = 10


class _Open:
    """The gate has opened already: nothing more to wait for."""

    def wait(self) -> None:
        return None


def main() -> None:
    wait_at_gate()
    url = dsn()
    backend = url.split(":", 1)[0].split("+", 1)[0]  # sqlite, postgresql, mariadb
    location = url.removeprefix("sqlite:///") if backend == "sqlite" else url
    _queuecore_ack_window(Target(backend, location), LIMIT, f"loop-{os.getpid()}", _Open())


if __name__ == "__main__":
    main()
