"""`queuecore copy --from DSN --to DSN`: the command around `queuecore.copy`, with a
progress bar on a terminal (tqdm, from the `progress` extra)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from queuecore import copying
from queuecore.cli import dsn_option


def add_arguments(parser: argparse.ArgumentParser) -> None:
    dsn_option.add(
        parser,
        "--from",
        dest="source",
        help="copy from this DSN (required, no default)",
        environment=False,
        required=True,
    )
    dsn_option.add(
        parser,
        "--to",
        dest="target",
        help="copy into this DSN (required, no default)",
        environment=False,
        required=True,
    )
    parser.add_argument(
        "--batch", type=int, default=1000, metavar="N", help="rows per commit (default 1000)"
    )
    parser.add_argument(
        "--live-leases",
        choices=("refuse", "keep"),
        default="refuse",
        help="jobs running under live leases on the source: refuse (default), or keep them "
        "with their leases when their workers are gone for good",
    )
    parser.add_argument(
        "--reserve-ids",
        type=int,
        default=copying.RESERVE_IDS,
        metavar="N",
        help="ids left to the source for the jobs it takes until the next copy: the "
        f"target's next id goes N past the source's last (default {copying.RESERVE_IDS:,})",
    )
    dsn_option.add_sqlite_driver(parser, "the DB-API module for either side")


def main(args: argparse.Namespace) -> int:
    options = dsn_option.driver(args)
    bar = _progress_bar(args, options)
    try:
        report = copying.copy(
            args.source,
            args.target,
            batch=args.batch,
            live_leases=args.live_leases,
            reserve_ids=args.reserve_ids,
            progress=None if bar is None else bar.update,
            **options,
        )
    finally:
        if bar is not None:
            bar.close()
    rate = report.seen / report.seconds if report.seconds > 0 else 0.0
    print(
        f"copied {report.copied} job(s) ({report.already_there} already on the target) in "
        f"{report.seconds:.1f}s, {rate:,.0f} jobs/s; new jobs on the target get ids above "
        f"{report.next_id}; the source may hand out {report.reserved:,} more id(s) before "
        "the next copy"
    )
    return 0


def _progress_bar(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:
        print("(pip install 'queuecore[progress]' for a progress bar)", file=sys.stderr)
        return None
    # A terminal that reports no size (a bare pty) would get no bar at all.
    size = os.get_terminal_size(sys.stderr.fileno())
    total = copying.count(args.source, **options)
    return tqdm(
        total=total,
        unit="job",
        file=sys.stderr,
        ncols=size.columns or 80,
        nrows=size.lines or 24,
    )
