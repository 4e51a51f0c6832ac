"""Where the command line takes a DSN from: `--dsn`, `--dsn-file PATH` or `$QUEUECORE_DSN`.

Anything on a command line is readable by every user of the host (`ps`), and a worker's
fork server and handler processes, forked from it, show the same command line. A DSN
with a password belongs in a file only its owner reads (`--dsn-file`), or in the
environment (`QUEUECORE_DSN`), which other users cannot read; a password given with
`--dsn` still works, with a warning that says where it belongs instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from queuecore.core.dsn import secrets_of

VARIABLE = "QUEUECORE_DSN"


def add(
    parser: argparse.ArgumentParser,
    option: str = "--dsn",
    *,
    dest: str | None = None,
    help: str = f"database URL (default: ${VARIABLE}); with a password, prefer --dsn-file",
    environment: bool = True,
    required: bool = False,
) -> None:
    """`option` and `option`-file, one or the other, filling the same `dest`."""
    dest = dest or option.lstrip("-").replace("-", "_")
    parser.set_defaults(**{f"{dest}_option": option})  # for the warning's wording
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument(
        option, dest=dest, default=os.environ.get(VARIABLE) if environment else None, help=help
    )
    group.add_argument(
        f"{option}-file",
        dest=f"{dest}_file",
        metavar="PATH",
        type=Path,
        help="read the DSN from this file (its first line), to keep a password off the "
        "command line, where `ps` shows it to every user of this host (default: none)",
    )


def add_common(parser: argparse.ArgumentParser, **dsn: Any) -> None:
    """The options every command that opens a queue takes: where the database is
    (`--dsn`, `--dsn-file`, `$QUEUECORE_DSN`) and which SQLite library opens it."""
    add(parser, **dsn)
    add_sqlite_driver(parser)


def add_sqlite_driver(
    parser: argparse.ArgumentParser, help: str = "the DB-API module that opens SQLite files"
) -> None:
    parser.add_argument(
        "--sqlite-driver",
        metavar="MODULE",
        help=f"SQLite only (ignored elsewhere): {help}, sqlite3 or pysqlite3 "
        "(default: pysqlite3 when installed with a fixed SQLite)",
    )


def driver(args: argparse.Namespace) -> dict[str, str]:
    """`connect()`'s keyword for --sqlite-driver, when it was given."""
    chosen = getattr(args, "sqlite_driver", None)
    return {"sqlite_driver": chosen} if chosen else {}


def resolve(args: argparse.Namespace) -> None:
    """Fill each DSN destination from its file where one was given, and warn about a
    password given on the command line itself."""
    for name, value in list(vars(args).items()):
        if not name.endswith("_file") or not hasattr(args, name.removesuffix("_file")):
            continue
        dest = name.removesuffix("_file")
        if value is not None:
            setattr(args, dest, read(value))
        elif secret_in_argv(args, dest):
            option = getattr(args, f"{dest}_option")
            instead = f"{option}-file PATH" + (f", or set ${VARIABLE}" if dest == "dsn" else "")
            print(
                f"queuecore: warning: {option} holds a password, readable by every user of "
                f"this host in the process list; put the DSN in a file only you can read and "
                f"pass {instead}",
                file=sys.stderr,
            )


def read(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8").strip().splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read the DSN file {path}: {exc.strerror}") from None
    if not lines or not lines[0].strip():
        raise ValueError(f"the DSN file {path} is empty")
    return lines[0].strip()


def secret_in_argv(args: argparse.Namespace, dest: str = "dsn") -> bool:
    """Whether the DSN in `dest` came from the command line itself, with a secret in it."""
    value = getattr(args, dest, None)
    if value is None or getattr(args, f"{dest}_file", None) is not None:
        return False
    return value != os.environ.get(VARIABLE) and bool(secrets_of(value))
