"""The run's harnesses, shared by the kit's plugin (which makes them from the backends a
run names) and its fixtures (which start the one a test needs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

from queuecore.conformance.harness import Harness, Unavailable


class Harnesses:
    """The run's harnesses: started on first use, stopped at the end of the session."""

    def __init__(self, classes: dict[str, type[Harness]], required: set[str]) -> None:
        self.classes = classes
        self.required = required
        self.running: dict[str, Harness] = {}
        self.unavailable: dict[str, str] = {}
        self.described: list[str] = []  # what the started ones said of themselves
        self._scratch: Callable[[str], Path] | None = None

    def open(self, scratch: Callable[[str], Path]) -> None:
        self._scratch = scratch

    def started(self, name: str) -> Harness:
        """The harness `name`, started; skips (or fails) the test when it cannot run."""
        if name not in self.classes:
            pytest.skip(f"backend {name} is not among this run's (--queuecore-backends)")
        if name in self.unavailable:
            self._cannot_run(name, self.unavailable[name])
        if name not in self.running:
            assert self._scratch is not None, "the harnesses fixture opens them"
            harness = self.classes[name]()
            try:
                harness.start(self._scratch(f"harness-{name}"))
            except Unavailable as exc:
                self.unavailable[name] = str(exc)
                self._cannot_run(name, str(exc))
            self.running[name] = harness
            said = harness.describe()
            if said:
                self.described.append(said)
        return self.running[name]

    def stop(self) -> None:
        for harness in self.running.values():
            harness.stop()
        self.running.clear()

    def _cannot_run(self, name: str, why: str) -> NoReturn:
        message = f"NO {name.upper()}: the {name} half of the suite cannot run: {why}"
        if name in self.required:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


HARNESSES = pytest.StashKey[Harnesses]()
