"""The dashboard's pages and actions as a Starlette application over one queue.

Pages are rendered on the server (Jinja2, autoescaped: a payload holding `<script>`
shows as text). A little script of our own (static/dashboard.js) refreshes the parts
marked `data-refresh` every few seconds; everything works without it.

Every action is a POST that first answers with a confirmation page (the same fields,
plus `confirmed`), and acts only when that page's form comes back: a person always sees
what is about to change, with or without JavaScript.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from queuecore.core import validate
from queuecore.dashboard.actions import ACTIONS, job_actions
from queuecore.dashboard.chart import bars
from queuecore.dashboard.security import (
    CSRF_FIELD,
    LOOPBACK_NAMES,
    Guard,
    csrf_passes,
    csrf_token,
)
from queuecore.observe import queries

HERE = Path(__file__).parent
PAGE_SIZE = 50


def when(epoch: float | datetime | None) -> str:
    if epoch is None:
        return ""
    moment = epoch if isinstance(epoch, datetime) else datetime.fromtimestamp(epoch, timezone.utc)
    return f"{moment.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def seconds(value: float | None) -> str:
    if value is None:
        return ""
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _cursor(text: str | None) -> tuple[float, int] | None:
    """The keyset cursor as it travels in a link: `finished_at:id`."""
    if not text:
        return None
    at, _, job_id = text.partition(":")
    return float(at), int(job_id)  # ListFilter checks both


def root_of(request: Request) -> str:
    """Where the dashboard is mounted in the application that serves it ("" at the top):
    every link and redirect starts with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _local_path(target: str | None, fallback: str) -> str:
    """Where to go back to after an action: a path on this site, never another site."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return fallback


class Dashboard:
    """The pages, over one queue (anything `queuecore.connect()` returns)."""

    def __init__(self, queue: Any, *, read_only: bool) -> None:
        self.queue = queue
        self.read_only = read_only
        self.registry: Any = None  # the metrics' registry, made on the first scrape
        environment = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        environment.filters["when"] = when
        environment.filters["seconds"] = seconds
        environment.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True)
        self.templates = Jinja2Templates(env=environment)

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.update(
            read_only=self.read_only,
            csrf_field=CSRF_FIELD,
            csrf_token=csrf_token(request),
            flash=request.session.pop("flash", None),
            finished_states=queries.FINISHED_STATES,
            path=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            root=root_of(request),
        )
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    # --- pages ----------------------------------------------------------------------

    def _overview(self) -> dict[str, Any]:
        with self.queue.engine.connect() as conn:
            overview = queries.read_overview(conn, self.queue.now())
        chart = bars(overview.per_minute["done"], overview.per_minute["dead"])
        totals = queries.QueueFigures("(all)")
        for figures in overview.queues:
            for field in (
                "queued",
                "running",
                "held_ahead",
                "ready",
                "dead",
                "cancelled",
                "done_last_hour",
                "dead_last_hour",
            ):
                setattr(totals, field, getattr(totals, field) + getattr(figures, field))
            totals.oldest_ready_age = max(totals.oldest_ready_age, figures.oldest_ready_age)
        return {"overview": overview, "chart": chart, "totals": totals}

    async def queues_page(self, request: Request) -> Response:
        context = await run_in_threadpool(self._overview)
        return self.render(request, "queues.html", **context)

    async def queues_fragment(self, request: Request) -> Response:
        context = await run_in_threadpool(self._overview)
        return self.render(request, "_queues.html", **context)

    async def jobs_page(self, request: Request) -> Response:
        args = request.query_params
        job_id, dedupe_key = args.get("id", "").strip(), args.get("dedupe_key", "").strip()
        if job_id or dedupe_key:
            return await self._find(request, job_id, dedupe_key)
        try:
            filters = queries.ListFilter(
                state=args.get("state") or "live",
                queue=args.get("queue") or None,
                kind=args.get("kind") or None,
                after=_cursor(args.get("after")),
            )
        except ValueError as exc:
            return self.render(request, "problem.html", 400, problem=str(exc))
        page = await run_in_threadpool(self._page, filters)
        links = self._links(filters, page, f"{root_of(request)}/jobs")
        return self.render(request, "jobs.html", filters=filters, page=page, **links)

    def _page(self, filters: queries.ListFilter) -> queries.JobPage:
        with self.queue.engine.connect() as conn:
            return queries.read_page(conn, filters, PAGE_SIZE, self.queue.now())

    def _links(
        self, filters: queries.ListFilter, page: queries.JobPage, path: str
    ) -> dict[str, Any]:
        base = {"state": filters.state, "queue": filters.queue or "", "kind": filters.kind or ""}
        base = {k: v for k, v in base.items() if v}
        following = None
        if page.next_after is not None:
            at, job_id = page.next_after
            following = f"{path}?" + urlencode({**base, "after": f"{at!r}:{job_id}"})
        tabs = {state: f"{path}?" + urlencode({**base, "state": state}) for state in queries.LISTS}
        return {"next_link": following, "tabs": tabs, "first_link": f"{path}?" + urlencode(base)}

    async def _find(self, request: Request, job_id: str, dedupe_key: str) -> Response:
        if job_id:
            try:
                found: int | None = validate.job_id(int(job_id))
            except (TypeError, ValueError):
                return self.render(request, "problem.html", 400, problem=f"not a job id: {job_id}")
        else:
            try:
                validate.searchable("dedupe_key", dedupe_key)
            except ValueError as exc:
                return self.render(request, "problem.html", 400, problem=str(exc))

            def lookup() -> int | None:
                with self.queue.engine.connect() as conn:
                    stmt = queries.by_dedupe_key()
                    keyed: int | None = conn.execute(stmt, {"dedupe_key": dedupe_key}).scalar()
                    return keyed

            found = await run_in_threadpool(lookup)
            if found is None:
                return self.render(
                    request,
                    "problem.html",
                    404,
                    problem=f"no job has the dedupe key {dedupe_key!r}",
                )
        return RedirectResponse(f"{root_of(request)}/jobs/{found}", status_code=303)

    async def job_page(self, request: Request) -> Response:
        job_id: int = request.path_params["job_id"]
        try:
            validate.job_id(job_id)
        except ValueError:  # past any id a database holds: no such job
            snapshot = None
        else:
            snapshot, now = await run_in_threadpool(
                lambda: (self.queue.get(job_id), self.queue.now())
            )
        if snapshot is None:
            return self.render(
                request, "problem.html", 404, problem=f"no job {job_id} (never made, or purged)"
            )
        waiting = snapshot.visible_at.timestamp() > now
        return self.render(
            request,
            "job.html",
            job=snapshot,
            facts=job_facts(snapshot, now),
            actions=[ACTIONS[name] for name in job_actions(snapshot.state, waiting)],
        )

    async def dead_page(self, request: Request) -> Response:
        try:
            filters = queries.ListFilter(
                state="dead",
                queue=request.query_params.get("queue") or None,
                kind=request.query_params.get("kind") or None,
                after=_cursor(request.query_params.get("after")),
            )
        except ValueError as exc:
            return self.render(request, "problem.html", 400, problem=str(exc))
        page = await run_in_threadpool(self._page, filters)
        links = self._links(filters, page, f"{root_of(request)}/dead")
        return self.render(request, "dead.html", filters=filters, page=page, **links)

    async def workers_page(self, request: Request) -> Response:
        """R33: every worker seen in the last hour, alive or gone."""
        seen = await run_in_threadpool(self.queue.workers)
        return self.render(request, "workers.html", workers=seen)

    async def metrics(self, request: Request) -> Response:
        """The queue-level Prometheus gauges (`queuecore.observe.metrics`), when that extra is
        here."""
        try:
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            from queuecore.observe.metrics import queue_registry
        except ImportError:
            return PlainTextResponse(
                "metrics need their extra: pip install 'queuecore[metrics]'", status_code=404
            )
        if self.registry is None:
            self.registry = queue_registry(self.queue)
        body = await run_in_threadpool(generate_latest, self.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    # --- actions --------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        action = ACTIONS.get(request.path_params["name"])
        if action is None:
            return self.render(request, "problem.html", 404, problem="no such action")
        if self.read_only:
            return self.render(request, "problem.html", 403, problem="this dashboard is read-only")
        raw = await request.form()
        form = {key: raw.getlist(key) for key in raw}
        if not csrf_passes(request, {CSRF_FIELD: raw.get(CSRF_FIELD)}):
            return self.render(
                request,
                "problem.html",
                403,
                problem="the form's CSRF token is missing or stale: reload the page and try again",
            )
        target = raw.get("next")
        back = _local_path(target if isinstance(target, str) else None, f"{root_of(request)}/")
        try:
            fields = action.parse(form)
        except (TypeError, ValueError) as exc:
            return self.render(request, "problem.html", 400, problem=str(exc))
        if raw.get("confirmed") != "1":
            hidden = [
                (key, value)
                for key, values in form.items()
                if key not in (CSRF_FIELD, "confirmed")
                for value in values
            ]
            return self.render(
                request,
                "confirm.html",
                action=action,
                question=action.question(fields),
                hidden=hidden,
                back=back,
            )
        message = await run_in_threadpool(action.run, self.queue, fields)
        request.session["flash"] = message
        return RedirectResponse(back, status_code=303)


def job_facts(snapshot: Any, now: float) -> list[tuple[str, str]]:
    """The job page's table of facts, in reading order."""
    waiting = snapshot.visible_at.timestamp() - now
    ready = (
        ("ready since", when(snapshot.visible_at))
        if snapshot.state == "queued" and waiting <= 0
        else ("ready at", f"{when(snapshot.visible_at)} (in {seconds(waiting)})")
        if snapshot.state == "queued"
        else ("lease ends", when(snapshot.visible_at))
        if snapshot.state == "running"
        else ("", "")
    )
    facts = [
        ("state", snapshot.state),
        ("kind", snapshot.kind),
        ("queue", snapshot.queue),
        ("priority", str(snapshot.priority)),
        ("attempts", f"{snapshot.attempts} of {snapshot.max_attempts}"),
        ("worker", snapshot.worker or ""),
        ("dedupe key", snapshot.dedupe_key or ""),
        ("created", when(snapshot.created_at)),
        ready,
        ("started", started(snapshot)),
        ("finished", when(snapshot.finished_at)),
    ]
    return [(label, value) for label, value in facts if label and value]


def started(snapshot: Any) -> str:
    """When this attempt's handler started; a running job whose handler has not started
    is held ahead of a slot by its worker (W9)."""
    if snapshot.started_at is None:
        return "not yet: held ahead of a free slot" if snapshot.state == "running" else ""
    return when(snapshot.started_at)


def create_app(
    queue: Any,
    *,
    read_only: bool = False,
    token: str | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES,
) -> Starlette:
    """The ASGI application. Requests must name one of `allowed_hosts` in their Host
    header (by default a loopback name): a DNS-rebinding page reaches the dashboard's
    address under a name of its own, and is refused."""
    dashboard = Dashboard(queue, read_only=read_only)
    routes = [
        Route("/", dashboard.queues_page),
        Route("/fragments/queues", dashboard.queues_fragment),
        Route("/jobs", dashboard.jobs_page),
        Route("/jobs/{job_id:int}", dashboard.job_page),
        Route("/dead", dashboard.dead_page),
        Route("/workers", dashboard.workers_page),
        Route("/metrics", dashboard.metrics),
        Route("/actions/{name}", dashboard.act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)),
        Middleware(Guard, token=token),
        Middleware(
            SessionMiddleware,
            secret_key=secrets.token_urlsafe(32),
            session_cookie="queuecore_dashboard",
            same_site="strict",
            https_only=False,
        ),
    ]
    return Starlette(routes=routes, middleware=middleware)
