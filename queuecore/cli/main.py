"""The `queuecore` command line: migrate, run workers, look at and mend the queue, demo.

Exit codes: 0 success, 2 usage error (the command line names something wrong), 1 any
other failure. Every failure prints one line on stderr that says what to do.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

import queuecore
from queuecore.cli import dsn_option
from queuecore.cli.common import UsageError, driver, names, need_dsn, open_queue
from queuecore.connect import connect, load_driver
from queuecore.core import validate
from queuecore.core.dsn import scrubbed, secrets_of
from queuecore.errors import QueuecoreError
from queuecore.migrate import check_schema, migrate
from queuecore.observe.tables import render
from queuecore.observe.terminal import printable
from queuecore.observe.worklog import configure_logging, first_line
from queuecore.registry import RegistryNotFound, load_registry
from queuecore.worker.processes import handler_processes
from queuecore.worker.processes.handler_processes import HandlerProcesses
from queuecore.worker.settings import DEFAULT_CANCEL_GRACE
from queuecore.worker.worker import Worker

#: "held ahead": running, claimed by a worker ahead of a free slot, its handler not
#: started yet (W9); "running" counts them too.
STATS_COLUMNS = (
    "queued",
    "running",
    "held_ahead",
    "ready_now",
    "oldest_ready_age_s",
    "dead",
    "cancelled",
)
KIND_STATS_COLUMNS = ("queued", "running", "ready_now", "oldest_ready_age_s")


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default at the end of its help, unless the help says it already;
    never the value of an option that may hold a secret (a DSN, a token) from the
    environment."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "default" in text.lower()
            or default is None
            or default is False
            or default == argparse.SUPPRESS
            or action.dest in SECRET_DESTS
        ):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, list) else f"{default:}"
        return f"{text} (default: {shown.replace('%', '%%')})"


#: Options whose default may come from the environment and hold a secret.
SECRET_DESTS = frozenset({"dsn", "source", "target", "token"})


class Parser(argparse.ArgumentParser):
    """argparse, with "did you mean" for a mistyped option, said by the command it was
    given to (argparse reports unknown options from the top-level parser, whose usage
    line is no help)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kw)
        self.argv: list[str] = []

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self.argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(self.argv, namespace)

    def error(self, message: str) -> Any:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:  # a mistyped command: `queuecore stat`
            close = difflib.get_close_matches(
                choice.group(1), re.findall(r"'([^']*)'", choice.group(2)), n=1
            )
            if close:
                message = f"{message}: did you mean {close[0]!r}?"
        if not message.startswith("unrecognized arguments:"):
            super().error(message)
        leaf = self._command_of(self.argv)
        unknown = message.partition(":")[2].split()
        options = [o for a in leaf._actions for o in a.option_strings if o.startswith("--")]
        hints = []
        for word in unknown:
            name = word.split("=", 1)[0]
            if name.startswith("-"):
                close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
                if close:
                    hints.append(f"{name}: did you mean {close[0]}?")
        said = f"{message}" + (f" ({'; '.join(hints)})" if hints else "")
        leaf.print_usage(sys.stderr)
        leaf.exit(2, f"{leaf.prog}: error: {said}\n")

    def _command_of(self, argv: Sequence[str]) -> argparse.ArgumentParser:
        """The (sub)command parser the words of `argv` name, this one if none."""
        parser: argparse.ArgumentParser = self
        for word in argv:
            subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if subparsers and word in subparsers[0].choices:
                parser = subparsers[0].choices[word]
        return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage and the problem
        return exc.code if isinstance(exc.code, int) else 2
    try:
        dsn_option.resolve(args)
        code: int = args.command(args)  # each command's main returns its exit status
        return code
    except (UsageError, ValueError, TypeError) as exc:  # the library's bad-input errors (R22)
        said = in_option_names(str(exc), parser)
        print(f"queuecore {args.subcommand}: {_shown(said, args)}", file=sys.stderr)
        return 2
    except (QueuecoreError, SQLAlchemyError, ImportError, OSError) as exc:
        print(f"queuecore {args.subcommand}: {_shown(_one_line(exc), args)}", file=sys.stderr)
        return 1


def _shown(message: str, args: argparse.Namespace) -> str:
    """A failure's line without a secret of any DSN the command was given (a driver may
    quote part of one), and without a control character of a stored name."""
    dsns = [getattr(args, dest, None) for dest in ("dsn", "source", "target")]
    return printable(scrubbed(message, [secret for dsn in dsns for secret in secrets_of(dsn)]))


def in_option_names(message: str, parser: argparse.ArgumentParser) -> str:
    """The library names its parameters (`lease_seconds must be ...`); on the command line
    the same value was given as an option (`--lease-seconds`), so say that instead."""
    for dest, option in _options(parser).items():
        message = re.sub(rf"(?<![\w-]){re.escape(dest)}(?= must\b|=\d+(?![\d.]))", option, message)
    return message


def _options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest -> its long option, over every command and subcommand."""
    found: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(_options(sub))
        elif action.option_strings and action.dest not in ("help", "source", "target"):
            found[action.dest] = max(action.option_strings, key=len)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="queuecore", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"queuecore {queuecore.__version__}")
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace], int], **kw: Any) -> Any:
        sub = commands.add_parser(name, formatter_class=HelpFormatter, **kw)
        sub.set_defaults(command=run)
        return sub

    migrate_ = command("migrate", _migrate, help="create or upgrade queuecore's schema")
    _dsn(migrate_)
    migrate_.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 naming the pending revisions unless the schema is at head",
    )

    worker = command("worker", _worker, help="run handlers for jobs until SIGTERM/SIGINT")
    worker.add_argument("registry", metavar="MODULE:REGISTRY", help="a mapping kind -> handler")
    _dsn(worker)
    worker.add_argument("--queues", type=names, help="comma-separated queues (default: all)")
    worker.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="jobs at once; with async def handlers, tasks of one event loop",
    )
    worker.add_argument(
        "--prefetch", type=int, help="jobs claimed ahead (default: about 50 ms of work, <= 128)"
    )
    worker.add_argument(
        "--lease-seconds",
        type=float,
        default=30.0,
        help="how long a claimed job is this worker's before another may take it; "
        "renewed by heartbeats while its handler runs",
    )
    worker.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="time limit of the handlers whose kind has none of its own (default: none)",
    )
    worker.add_argument(
        "--cancel-grace",
        type=float,
        default=DEFAULT_CANCEL_GRACE,
        metavar="S",
        help="kill a handler still running S s after its job was cancelled or its lease lost",
    )
    worker.add_argument(
        "--backoff-base", type=float, default=1.0, help="seconds before the first retry"
    )
    worker.add_argument(
        "--backoff-cap", type=float, default=60.0, help="the longest wait between retries, s"
    )
    worker.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        help="seconds between claims while no job is ready",
    )
    worker.add_argument(
        "--grace-seconds",
        type=float,
        default=30.0,
        help="on SIGTERM, how long running handlers get to finish",
    )
    worker.add_argument(
        "--exit-when-idle",
        type=float,
        metavar="S",
        help="exit once no job was ready for S s (default: never)",
    )
    worker.add_argument(
        "--ack-batch", type=int, default=100, metavar="N", help="completions per commit"
    )
    worker.add_argument(
        "--ack-ms",
        type=float,
        default=50.0,
        metavar="T",
        help="longest wait of a completion for its batch, ms; 0 or --ack-batch 1: none",
    )
    worker.add_argument("--name", help="worker name in the jobs table (default host-pid)")
    worker.add_argument(
        "--metrics-port", type=int, metavar="P", help="serve Prometheus /metrics (default: off)"
    )
    worker.add_argument(
        "--metrics-host", default="127.0.0.1", help="address --metrics-port listens on"
    )
    worker.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        help="DEBUG, INFO, WARNING or ERROR",
    )

    schedules = command("schedules", _schedules, help="a registry's periodic jobs and next runs")
    schedules.add_argument("registry", metavar="MODULE:REGISTRY", help="a queuecore.Registry")
    dsn_option.add_common(
        schedules, help="read the time from this queue's clock (default: this host's clock)"
    )

    stats = command("stats", _stats, help="queued, running, ready and dead jobs per queue")
    _dsn(stats)
    stats.add_argument("--json", action="store_true", help="print JSON for machines")

    dead = commands.add_parser(
        "dead", formatter_class=HelpFormatter, help="the jobs that ran out of attempts"
    )
    dead_commands = dead.add_subparsers(dest="dead_command", required=True, metavar="ACTION")
    listing = dead_commands.add_parser(
        "list", formatter_class=HelpFormatter, help="the newest dead jobs"
    )
    listing.set_defaults(command=_dead_list)
    _dsn(listing)
    listing.add_argument("--queue", help="only this queue's (default: every queue's)")
    listing.add_argument("--limit", type=int, default=50, help="at most this many")
    listing.add_argument("--json", action="store_true", help="print JSON for machines")
    requeue = dead_commands.add_parser(
        "requeue", formatter_class=HelpFormatter, help="give dead jobs another set of attempts"
    )
    requeue.set_defaults(command=_dead_requeue)
    _dsn(requeue)
    requeue.add_argument("ids", nargs="*", type=int, metavar="ID", help="the dead jobs' ids")
    requeue.add_argument("--all", action="store_true", help="every dead job")

    purge = command("purge", _purge, help="delete finished jobs older than S seconds")
    _dsn(purge)
    purge.add_argument(
        "--older-than",
        type=float,
        required=True,
        metavar="S",
        help="delete jobs finished more than S seconds ago (required: no default)",
    )
    purge.add_argument(
        "--states", type=names, default=["done"], help="which of done,dead,cancelled"
    )

    from queuecore import demo  # their options live with them
    from queuecore.cli import copy

    copy.add_arguments(command("copy", copy.main, help="move jobs between DSNs"))

    demo.add_arguments(command("demo", demo.main, help="watch the queue survive chaos"))

    from queuecore.cli import jobs

    jobs.add_commands(command, _dsn)

    from queuecore.cli import dashboard  # needs only argparse to load

    dashboard.add_arguments(command("dashboard", dashboard.main, help="a web UI over the queue"))

    from queuecore.cli import metrics

    metrics.add_arguments(command("metrics", metrics.main, help="serve queue gauges to Prometheus"))
    return parser


def _dsn(parser: argparse.ArgumentParser) -> None:
    dsn_option.add_common(parser)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, SQLAlchemyError):  # its text carries the SQL and a link; the cause is enough
        text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- commands ---------------------------------------------------------------------------


def _migrate(args: argparse.Namespace) -> int:
    if args.check:  # a pending upgrade raises NotMigratedError: one line, exit 1
        revision = check_schema(need_dsn(args), **driver(args))
        print(f"queuecore schema is at revision {revision}, the newest this queuecore knows")
        return 0
    revision = migrate(need_dsn(args), **driver(args))
    print(f"queuecore schema is at revision {revision}")
    return 0


def _worker(args: argparse.Namespace) -> int:
    need_dsn(args)  # the first thing to say when it is missing
    load_driver(args.dsn)  # before the fork server: it and its forks inherit the import
    # Its imports overlap loading the registry and connecting. A fork would repeat a
    # password given on this command line in its own, and in each handler process's.
    handler_processes.prestart(fork=not dsn_option.secret_in_argv(args))
    try:
        handlers = load_registry(args.registry)
    except RegistryNotFound as exc:
        raise UsageError(str(exc)) from exc
    validate.at_least("--concurrency", args.concurrency, 1)  # before it sizes the pool
    configure_logging(args.log_level, secrets_of(args.dsn))
    logging.getLogger("alembic").setLevel(logging.WARNING)
    queue = open_queue(
        args,
        lease_seconds=args.lease_seconds,
        backoff_base=args.backoff_base,
        backoff_cap=args.backoff_cap,
        # The claimer, heartbeat and ack window keep connections of their own, out of the
        # pool, and the handler processes theirs: the pool serves the worker's occasional
        # transactions (its record, the reason a report was refused, the idle check), one
        # at a time. A larger pool kept an idle connection for each that once overlapped,
        # past the budget docs/how-to/many-hosts.md gives (a sixth seen in CI).
        pool_size=1,
        max_overflow=0,
    )
    observer = _worker_metrics(args)
    try:
        Worker(
            queue,
            handlers,
            concurrency=args.concurrency,
            queues=args.queues,
            name=args.name,
            prefetch=args.prefetch,
            poll_interval=args.poll_interval,
            grace_seconds=args.grace_seconds,
            timeout=args.timeout,
            cancel_grace=args.cancel_grace,
            exit_when_idle=args.exit_when_idle,
            ack_batch=args.ack_batch,
            ack_seconds=args.ack_ms / 1000,
            observer=observer,
            handler_processes=HandlerProcesses(  # W7: a crash takes only its own job
                args.registry,
                args.dsn,
                {"sqlite_driver": args.sqlite_driver} if args.sqlite_driver else {},
                log_level=args.log_level,
            ),
        ).run()
    finally:
        queue.close()
    return 0


def _worker_metrics(args: argparse.Namespace) -> Any:
    from queuecore.observe.observer import NO_OBSERVER

    if args.metrics_port is None:
        return NO_OBSERVER
    from queuecore.cli.metrics import metrics_extra

    observer = metrics_extra().PrometheusObserver(slots=args.concurrency)
    observer.serve(args.metrics_port, args.metrics_host)
    return observer


def _schedules(args: argparse.Namespace) -> int:
    try:
        registry = load_registry(args.registry)
    except RegistryNotFound as exc:
        raise UsageError(str(exc)) from exc
    schedules = getattr(registry, "schedules", ())
    if not schedules:
        print(f"{args.registry} has no periodic jobs")
        return 0
    if args.dsn:
        with connect(args.dsn, **driver(args)) as queue:
            now = queue.now()
    else:
        now = time.time()
    rows = []
    for s in schedules:
        tick = s.next_after(now)
        rows.append(
            [
                s.name,
                s.cron,
                s.timezone,
                s.kind,
                s.queue,
                s.missed,
                "never"
                if tick is None
                else f"{datetime.fromtimestamp(tick, s.zone):%Y-%m-%d %H:%M:%S %Z}",
            ]
        )
    print(render(["name", "cron", "timezone", "kind", "queue", "missed", "next run"], rows))
    return 0


def _stats(args: argparse.Namespace) -> int:
    with open_queue(args) as queue:
        stats = queue.stats()
        _add_last_hour(queue, stats)
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
        return 0
    columns = (*STATS_COLUMNS, *LAST_HOUR)
    rows = [[name, *(s[c] for c in columns)] for name, s in sorted(stats["queues"].items())]
    rows.append(["(all)", *(stats[c] for c in columns)])
    headers = [
        "queue",
        "queued",
        "running",
        "held ahead",
        "ready now",
        "oldest ready (s)",
        "dead",
        "cancelled",
    ]
    print(render([*headers, "done (1 h)", "dead (1 h)"], rows))
    print(f"\n{_kinds_table(stats['kinds'])}")
    return 0


#: The jobs that finished over the last hour, per queue, as the dashboard counts them.
LAST_HOUR = ("done_last_hour", "dead_last_hour")


def _add_last_hour(queue: Any, stats: dict[str, Any]) -> None:
    """Done and dead over the last hour, read through the finished rows' indexes for that
    hour only (`queuecore.observe.queries`): a queue whose jobs all finished within the
    hour is still listed."""
    from queuecore.observe.queries import read_overview

    with queue.engine.connect() as conn:
        overview = read_overview(conn, queue.now())
    empty = {**dict.fromkeys(STATS_COLUMNS, 0), "oldest_ready_age_s": 0.0}
    for field in LAST_HOUR:
        stats[field] = 0
    for figures in overview.queues:
        entry = stats["queues"].setdefault(figures.name, dict(empty))
        for field in LAST_HOUR:
            entry[field] = getattr(figures, field)
            stats[field] += entry[field]
    for entry in stats["queues"].values():
        for field in LAST_HOUR:
            entry.setdefault(field, 0)


def _kinds_table(kinds: dict[str, dict[str, Any]]) -> str:
    """Live jobs per kind: a kind whose ready jobs only grow is one no running worker
    has a handler for (W2: workers claim only the kinds they know)."""
    if not kinds:
        return "no live jobs of any kind"
    rows = [[kind, *(s[c] for c in KIND_STATS_COLUMNS)] for kind, s in sorted(kinds.items())]
    return render(["kind", "queued", "running", "ready now", "oldest ready (s)"], rows)


def _dead_list(args: argparse.Namespace) -> int:
    with open_queue(args) as queue:
        dead = queue.dead_jobs(args.queue, limit=args.limit)
    # Payloads are left out on purpose: they may hold secrets; `get` shows one on demand.
    if args.json:
        fields = ("id", "kind", "queue", "attempts", "max_attempts", "last_error")
        listed = [
            {**{f: getattr(j, f) for f in fields}, "finished_at": j.finished_at.isoformat()}
            for j in dead
        ]
        print(json.dumps(listed, indent=2))
        return 0
    if not dead:
        print("no dead jobs")
        return 0
    rows = [
        [
            j.id,
            j.kind,
            j.queue,
            j.attempts,
            f"{j.finished_at:%Y-%m-%d %H:%M:%S}",
            first_line(j.last_error or "")[:70],
        ]
        for j in dead
    ]
    print(render(["id", "kind", "queue", "attempts", "died (UTC)", "last error"], rows))
    print("\nrequeue some with: queuecore dead requeue ID [ID ...]   (or --all)")
    return 0


def _dead_requeue(args: argparse.Namespace) -> int:
    if bool(args.ids) == args.all:
        raise UsageError("name the dead jobs to requeue (ID ...), or pass --all")
    with open_queue(args) as queue:
        requeued = queue.requeue_dead(None if args.all else args.ids)
    missing = sorted(set(args.ids) - set(requeued))
    print(f"requeued {len(requeued)} job(s)" + (f": {requeued}" if requeued else ""))
    if missing:
        print(f"not dead (or no such job), left alone: {missing}", file=sys.stderr)
        return 1
    return 0


def _purge(args: argparse.Namespace) -> int:
    with open_queue(args) as queue:
        purged = queue.purge(older_than=args.older_than, states=args.states)
    print(f"purged {purged} finished job(s) older than {args.older_than:g}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
