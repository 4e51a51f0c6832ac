"""What every command of the `queuecore` command line shares: the usage error (exit 2),
comma-separated names, and the queue the options name."""

from __future__ import annotations

import argparse
from typing import Any

from queuecore.cli import dsn_option
from queuecore.connect import connect


class UsageError(Exception):
    """The command line is wrong; exit 2."""


def names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one")
    return names


def need_dsn(args: argparse.Namespace) -> str:
    if not args.dsn:
        raise UsageError("no database: pass --dsn-file PATH or --dsn DSN, or set QUEUECORE_DSN")
    return str(args.dsn)


def open_queue(args: argparse.Namespace, **options: Any) -> Any:
    dsn = need_dsn(args)
    return connect(dsn, **driver(args), **options)


def driver(args: argparse.Namespace) -> dict[str, str]:
    """--sqlite-driver, for every command whatever the DSN: other backends ignore it."""
    return dsn_option.driver(args)
