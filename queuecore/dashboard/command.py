"""The `queuecore dashboard` command: its options, the safety checks made before it
listens, and the server (uvicorn) it runs in."""

from __future__ import annotations

import argparse
import os
import sys

from queuecore import dsn_option

TOKEN_VARIABLE = "QUEUECORE_DASHBOARD_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    dsn_option.add(parser)
    parser.add_argument("--port", type=int, default=8080, help="default 8080")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this host only); any other "
        f"address needs --read-only or a token (--token or ${TOKEN_VARIABLE})",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="show the queue, offer and accept no action"
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_VARIABLE),
        help=f"every request must give it as the basic-auth password (default: ${TOKEN_VARIABLE})",
    )
    parser.add_argument("--log-level", default="info", type=str.lower)


def main(args: argparse.Namespace) -> int:
    # Imported here: the command line must work without the dashboard extra installed.
    try:
        import uvicorn

        from queuecore.dashboard.app import create_app
    except ImportError as exc:
        raise ImportError(
            f"the dashboard needs its extra: pip install 'queuecore[dashboard]' ({exc})"
        ) from exc
    from queuecore.connect import connect
    from queuecore.dashboard.security import is_loopback

    if not args.dsn:
        raise ValueError("no database: pass --dsn-file PATH or --dsn DSN, or set QUEUECORE_DSN")
    loopback = is_loopback(args.host)
    if not loopback and not args.read_only and not args.token:
        raise ValueError(
            f"--host {args.host} listens beyond this host: its actions need a token "
            f"(--token or ${TOKEN_VARIABLE}), or pass --read-only"
        )
    if args.token is not None and args.token != os.environ.get(TOKEN_VARIABLE):
        print(
            f"queuecore dashboard: warning: --token is readable by every user of this host in "
            f"the process list; set ${TOKEN_VARIABLE} instead",
            file=sys.stderr,
        )
    if args.token is not None and len(args.token) < 16:
        raise ValueError("the token must be at least 16 characters long")
    queue = connect(args.dsn)
    try:
        app = create_app(queue, read_only=args.read_only, token=args.token, loopback=loopback)
        print(
            f"queuecore dashboard on http://{args.host}:{args.port}/"
            + (" (read-only)" if args.read_only else ""),
            file=sys.stderr,
            flush=True,
        )
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        queue.close()
    return 0
