"""The `queuecore dashboard` command: its options, the safety checks made before it
listens, and the server (uvicorn) it runs in."""

from __future__ import annotations

import argparse
import os
import sys

from queuecore.cli import dsn_option

TOKEN_VARIABLE = "QUEUECORE_DASHBOARD_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    dsn_option.add_common(parser)
    parser.add_argument("--port", type=int, default=8080, help="port to listen on")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this host only); any other "
        f"address needs a token (${TOKEN_VARIABLE}), --read-only too",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the dashboard answers to (the Host header; *.example.com for "
        "every subdomain), again for more; default: the --host address, this host's names "
        "and loopback. Any other name is refused, as a DNS-rebinding page would send",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="show the queue, offer and accept no action"
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_VARIABLE),
        help=f"every request must give it as the basic-auth password (default: ${TOKEN_VARIABLE}, "
        "none when unset); prefer the variable, as a command line is readable by every user "
        "of this host",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        help="the server's log level: debug, info, warning or error",
    )


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
    from queuecore.dashboard.security import allowed_hosts, is_loopback

    if not args.dsn:
        raise ValueError("no database: pass --dsn-file PATH or --dsn DSN, or set QUEUECORE_DSN")
    if not is_loopback(args.host) and not args.token:  # pages show payloads: read-only too
        raise ValueError(
            f"--host {args.host} listens beyond this host: it needs a token (set "
            f"${TOKEN_VARIABLE}), --read-only too, since its pages show payloads and errors"
        )
    if args.token is not None and args.token != os.environ.get(TOKEN_VARIABLE):
        print(
            f"queuecore dashboard: warning: --token is readable by every user of this host in "
            f"the process list; set ${TOKEN_VARIABLE} instead",
            file=sys.stderr,
        )
    if args.token is not None and len(args.token) < 16:
        raise ValueError("the token must be at least 16 characters long")
    queue = connect(args.dsn, **dsn_option.driver(args))
    try:
        app = create_app(
            queue,
            read_only=args.read_only,
            token=args.token,
            allowed_hosts=allowed_hosts(args.host, args.allowed_host),
        )
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
