"""The tutorial's API: POST a job, get 202 and where to look; GET it until it is done.

    QUEUECORE_DSN=sqlite:///jobs.db uvicorn examples.webapi.app:app
    queuecore worker examples.webapi.jobs:REGISTRY --dsn sqlite:///jobs.db

- `POST /jobs` with `{"kind": ..., "payload": {...}}` answers 202 Accepted and a
  `Location`. With an `Idempotency-Key` header, a retried POST (same key, same body)
  answers 200 with the same job; the same key with another body is 409 Conflict.
- `GET /jobs/{id}` answers the status, attempts, result and error; while the job is
  pending, `Retry-After` says when to ask again. `?wait=S` holds the answer up to S
  seconds until the job finishes (long polling, `queue.wait`).
- `DELETE /jobs/{id}` cancels a queued or running job (409 once it has finished).
- `GET /jobs?state=dead&kind=...&queue=...&after=ID&limit=N` lists jobs for an operator
  (`queue.list_jobs`, R31): each filter repeats for several values, and `next` is the
  link to the next page. Put it behind your application's own authentication.

The endpoints are `async def` on `queuecore.connect_async`, opened and closed by the
lifespan: a request that waits on the database (a held lock, a `?wait=` long poll)
yields the event loop instead of blocking every other request behind it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

import queuecore
from examples.webapi.jobs import REGISTRY

MAX_WAIT_SECONDS = 30.0


class NewJob(BaseModel):
    kind: str
    payload: dict[str, Any] = Field(default_factory=dict)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with queuecore.connect_async(os.environ["QUEUECORE_DSN"]) as queue:
        app.state.queue = queue
        yield


app = FastAPI(title="queuecore example", lifespan=lifespan)


def _queue(request: Request) -> queuecore.AsyncQueue:
    queue: queuecore.AsyncQueue = request.app.state.queue
    return queue


@app.post("/jobs", status_code=202, response_model=None)
async def create_job(
    job: NewJob,
    request: Request,
    response: Response,
    idempotency_key: str | None = Header(default=None),
) -> dict[str, Any] | JSONResponse:
    if job.kind not in REGISTRY:
        raise HTTPException(422, f"unknown kind {job.kind!r}; known: {sorted(REGISTRY)}")
    try:
        res = await _queue(request).enqueue(
            job.kind,
            job.payload,
            dedupe_key=None if idempotency_key is None else f"http:{idempotency_key}",
        )
    except queuecore.DedupeConflict as conflict:
        return JSONResponse(
            status_code=409,
            content={
                "detail": "this Idempotency-Key was used for another request",
                "existing_id": conflict.existing_id,
            },
            headers={"Location": f"/jobs/{conflict.existing_id}"},
        )
    if not res.created:
        response.status_code = 200  # the retried request's job, not a new one
    response.headers["Location"] = f"/jobs/{res.id}"
    return {"id": res.id, "status_url": f"/jobs/{res.id}"}


@app.get("/jobs")
async def list_jobs(
    request: Request,
    state: Annotated[list[str] | None, Query()] = None,
    kind: Annotated[list[str] | None, Query()] = None,
    queue: Annotated[list[str] | None, Query()] = None,
    after: int | None = Query(default=None, ge=0),
    limit: int = Query(default=50, ge=1, le=500),
) -> dict[str, Any]:
    try:
        listed = await _queue(request).list_jobs(
            state=state, kind=kind, queue=queue, after_id=after, limit=limit
        )
    except ValueError as exc:  # an unknown state, say
        raise HTTPException(422, str(exc)) from exc
    jobs = [
        {
            "id": snap.id,
            "kind": snap.kind,
            "queue": snap.queue,
            "status": snap.state,
            "attempts": snap.attempts,
            "errors": [
                {
                    "attempt": e["attempt"],
                    "at": e["at"].isoformat(),
                    "error": _first_line(e["error"]),
                }
                for e in snap.errors
            ],
        }
        for snap in listed
    ]
    following = None
    if len(listed) == limit:
        following = str(request.url.include_query_params(after=listed[-1].id))
    return {"jobs": jobs, "next": following}


@app.get("/jobs/{job_id}")
async def read_job(
    job_id: int,
    request: Request,
    response: Response,
    wait: float = Query(default=0, ge=0, le=MAX_WAIT_SECONDS),
) -> dict[str, Any]:
    queue = _queue(request)
    snap = await (queue.wait(job_id, timeout=wait) if wait else queue.get(job_id))
    if snap is None:
        raise HTTPException(404, f"no job {job_id}")
    if not snap.finished:
        # When to look again: when a delayed or retrying job becomes ready, or soon.
        ready_in = snap.visible_at.timestamp() - time.time() if snap.state == "queued" else 1
        response.headers["Retry-After"] = str(max(1, math.ceil(ready_in)))
    return {
        "id": snap.id,
        "kind": snap.kind,
        "status": snap.state,
        "attempts": snap.attempts,
        "max_attempts": snap.max_attempts,
        "result": snap.result,
        "error": None if snap.state == "done" else _first_line(snap.last_error),
        "created_at": snap.created_at.isoformat(),
        "finished_at": None if snap.finished_at is None else snap.finished_at.isoformat(),
    }


@app.delete("/jobs/{job_id}")
async def cancel_job(job_id: int, request: Request) -> dict[str, Any]:
    queue = _queue(request)
    if await queue.cancel(job_id):
        return {"id": job_id, "status": "cancelled"}
    snap = await queue.get(job_id)
    if snap is None:
        raise HTTPException(404, f"no job {job_id}")
    raise HTTPException(409, f"job {job_id} is {snap.state} already: nothing to cancel")


def _first_line(error: str | None) -> str | None:
    """The error itself, not the traceback the worker stored with it (for the operator)."""
    return None if error is None else error.strip().splitlines()[0]
