"""`queuecore metrics`: the queue-level Prometheus gauges, read from the database by one
process (not by every worker) at each scrape. Needs the `metrics` extra."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from queuecore.cli import dsn_option


def add_arguments(parser: argparse.ArgumentParser) -> None:
    dsn_option.add_common(parser)
    parser.add_argument("--port", type=int, default=9469, help="port to serve /metrics on")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")


def metrics_extra() -> Any:
    try:
        from queuecore.observe import metrics
    except ImportError as exc:
        raise ImportError(
            f"metrics need their extra: pip install 'queuecore[metrics]' ({exc})"
        ) from exc
    return metrics


def main(args: argparse.Namespace) -> int:
    metrics = metrics_extra()
    from prometheus_client import start_http_server

    from queuecore.connect import connect

    if not args.dsn:
        raise ValueError("no database: pass --dsn-file PATH or --dsn DSN, or set QUEUECORE_DSN")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with connect(args.dsn, **dsn_option.driver(args)) as queue:
        server, thread = start_http_server(
            args.port, addr=args.host, registry=metrics.queue_registry(queue)
        )
        print(f"queuecore metrics on http://{args.host}:{args.port}/metrics", file=sys.stderr)
        stop.wait()
        server.shutdown()
        thread.join(timeout=5)
    return 0
