"""`queuecore.Queue` is the whole queue: every backend satisfies it (checked by mypy,
statically), and nothing a backend offers its users is missing from it (checked at run
time), so code typed against the protocol never needs a backend's class."""

from __future__ import annotations

import inspect
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from queuecore.contract import ENTRY_POINT_GROUP
from queuecore.executors.sqlqueue import SQLQueue
from queuecore.protocol import Queue

REPO = Path(__file__).resolve().parents[1]

#: Class-level hooks a backend gives `connect` and `copy`, not its users: the backend
#: side of the contract (docs/contract.md, "What a backend guarantees").
#: `backend_class` / `make_backend` give both executors the backend's statement-level
#: hooks (`queuecore.contract.Backend`).
BACKEND_HOOKS = {
    "create_engine",
    "id_sequence",
    "advance_id_sequence",
    "backend_class",
    "backend_options",  # the dataclass of its own options (queuecore.contract)
    "make_backend",
    "migrating",  # the lock migrations take turns on
    "finish_signal",  # what wait() sleeps on between two looks (queuecore.contract)
}


def backends() -> list[type]:
    """The base class and every backend installed through the entry points."""
    return [SQLQueue, *(entry.load() for entry in entry_points(group=ENTRY_POINT_GROUP))]


def public_methods(cls: type) -> set[str]:
    names = {name for name in dir(cls) if not name.startswith("_")} | {"__enter__", "__exit__"}
    return {name for name in names if _is_method(inspect.getattr_static(cls, name))}


def _is_method(attribute: object) -> bool:
    return callable(attribute) or isinstance(attribute, (classmethod, staticmethod))


def protocol_members() -> set[str]:
    return {name for name in vars(Queue) if not name.startswith("_")} | {"__enter__", "__exit__"}


@pytest.mark.parametrize("backend", backends(), ids=lambda cls: cls.__name__)
def test_every_public_method_of_a_backend_is_in_the_protocol(backend: type) -> None:
    missing = public_methods(backend) - BACKEND_HOOKS - protocol_members()
    assert not missing, f"{backend.__name__} offers {sorted(missing)}, which Queue lacks"


def test_the_hooks_left_out_are_still_there() -> None:
    # The exclusions must not outlive the methods they excuse.
    for backend in backends():
        assert public_methods(backend) >= BACKEND_HOOKS


def test_mypy_accepts_every_backend_as_a_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Structural typing, checked the way a user's type checker checks their code: a
    missing member or an incompatible signature fails here, not in the user's CI."""
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "uses_backends_as_queues.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from backends.mariadb import MariaDBQueue
            from backends.postgresql import PostgresQueue
            from backends.sqlite import SQLiteQueue
            from queuecore.protocol import Queue
            from queuecore.executors.sqlqueue import SQLQueue


            def as_queues(
                a: SQLQueue, b: SQLiteQueue, c: PostgresQueue, d: MariaDBQueue
            ) -> list[Queue]:
                with a as entered:
                    return [a, b, c, d, entered]
            """
        )
    )
    monkeypatch.setenv("MYPYPATH", str(REPO))  # `backends` as the source tree names it
    stdout, stderr, status = api.run(
        [
            "--strict",
            "--follow-imports=silent",  # judge the snippet, not the modules it imports
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            str(snippet),
        ]
    )
    assert status == 0, stdout + stderr
