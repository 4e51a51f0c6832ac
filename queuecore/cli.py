"""The `queuecore` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from queuecore.errors import QueuecoreError
from queuecore.migrate import migrate


def _dsn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn",
        default=os.environ.get("QUEUECORE_DSN"),
        help="database URL (default: $QUEUECORE_DSN)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queuecore", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _dsn(commands.add_parser("migrate", help="create or upgrade queuecore's schema"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("no database: pass --dsn or set QUEUECORE_DSN")
    try:
        revision = migrate(args.dsn)
    except (QueuecoreError, ValueError, ModuleNotFoundError) as exc:
        print(f"queuecore: {exc}", file=sys.stderr)
        return 1
    print(f"queuecore schema is at revision {revision}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
