"""What the operations layer asks an executor to do: plain data, no I/O.

`queuecore.core.operations` decides, per operation, which statements to send and how their
rows become the answer; the sync queue (`SQLQueue`) and the async one (`AsyncQueue`)
only send. An operation hands back one of these plans:

- `Hot`: compiled statements for the driver connection of the hot path (one transaction),
  and `finish`, which turns what came back into the answer, or into the next `Hot` round
  (a claim that met rows dead by R08 looks again). No generator on this path: claim and
  complete run tens of thousands of times a second, and a generator costs microseconds.
- `Tx`: a program run inside one SQLAlchemy transaction (the queue's own, or the caller's
  `conn=`). The program is a generator that yields requests (`Run`, `RunCompiled`,
  `CallEffect`, a savepoint request, `INVALIDATED`) and receives their answers; an
  exception the request raised is thrown back into it at the `yield`, so it reads like
  straight-line code.
- `Ready`: the answer is known without the database (an empty batch).
- a generator of plans, for an operation of several transactions (purge's batches).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar, final

from queuecore.sql.compiled import Compiled

#: The answer an operation's plan comes to (what the queue's method returns).
A = TypeVar("A")

#: One statement to run on the driver: its compiled form and its parameters.
Step = tuple[Compiled, Mapping[str, Any]]
#: What the driver gave back for one step: (rowcount, rows, the columns' type codes).
Outcome = tuple[int, list[tuple[Any, ...]], tuple[Any, ...]]
#: The driver's form of a step: SQL text and laid-out parameters.
DriverStep = tuple[str, Any]
#: Runs one driver step inside a transaction on the driver connection, fetching its rows.
RunOnDriver = Callable[[str, Any], Outcome]

# The plans are generic in their answer, so each operation's return type is checked from
# its `finish` to the queue's method. Slotted dataclasses: a generic NamedTuple needs
# Python 3.11, and these are built and read no slower (the hot path makes one per call).
# Final, so that `type(plan) is Hot` tells the checker what `plan` is not, too.


@final
@dataclass(slots=True)
class Hot(Generic[A]):
    """Statements for the hot path, run in one transaction; `finish` makes the answer
    (or the next round: another `Hot`)."""

    steps: Sequence[Step]
    finish: Callable[[list[Outcome]], A | Hot[A]]


class Run(NamedTuple):
    """Execute one SQLAlchemy statement on the transaction's connection; the answer is
    its result (parameters as a list: executemany)."""

    statement: Any
    params: Any = None


class RunCompiled(NamedTuple):
    """Execute one compiled statement on the transaction's connection; the answer is its
    `Outcome`. A program of these alone can run on the hot path's driver connection."""

    compiled: Compiled
    params: Mapping[str, Any]


class CallEffect(NamedTuple):
    """Call the caller's effect with the transaction's connection (R10)."""

    effect: Callable[[Any], object]


class Savepoint(enum.Enum):
    """Requests for the one savepoint a program may hold at a time."""

    BEGIN = "begin"
    ROLLBACK = "rollback"
    COMMIT = "commit"


class Ask(enum.Enum):
    #: Whether the transaction's connection died (an effect's error is then not its own).
    INVALIDATED = "invalidated"


INVALIDATED = Ask.INVALIDATED

#: A program run inside a transaction: yields requests, receives their answers, and
#: returns what its operation comes to.
Program = Generator[Any, Any, A]


@final
@dataclass(slots=True)
class Tx(Generic[A]):
    """Run `body` in a transaction: a write one (BEGIN IMMEDIATE on SQLite) or a read one,
    or in the caller's own when `conn` is given (then neither begun nor committed here).
    `calls_back`: the program calls the caller's effects (an async queue must then run
    it on its event loop, where an `async def` effect can be awaited). `hot`: it asks
    only `RunCompiled`, so the queue may run it in a transaction on the hot path's own
    driver connection (the claim in steps, where a claim cannot be one statement).
    `turn`: it is a claim made while claims keep having to read again
    (`claim_steps.Contention`), which waits for its turn first where the backend has
    turns (`Backend.transaction_on_driver`)."""

    body: Program[A]
    write: bool = True
    conn: Any = None
    calls_back: bool = False
    hot: bool = False
    turn: bool = False


@final
@dataclass(slots=True)
class Ready(Generic[A]):
    """An answer known without asking the database."""

    value: A


#: What an operation of several transactions yields: each plan's answer comes back.
Plans = Generator[Any, Any, A]

#: Any plan that comes to an `A`.
Plan = Hot[A] | Tx[A] | Ready[A] | Plans[A]
