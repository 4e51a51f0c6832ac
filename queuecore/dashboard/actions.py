"""The dashboard's actions: what each changes, which jobs it applies to, and the question
a person confirms before it runs. Each goes through the queue's own operations where
there is one, so the dashboard can never do what the contract forbids."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Update, bindparam, update

from queuecore.core import validate
from queuecore.observe.queries import NOW
from queuecore.sql.schema import QUEUED, jobs

PURGEABLE = ("done", "dead", "cancelled")

#: The parsed form of an action: names as in the HTML form, values already validated.
Fields = Mapping[str, Any]


def retry_now_statement() -> Update:
    """A queued job waiting out its backoff (or a delay) becomes ready this instant.
    Only `visible_at` of a queued row changes: a running job's lease is not touched."""
    return (
        update(jobs)
        .where(jobs.c.id == bindparam("job_id"), jobs.c.state == QUEUED, jobs.c.visible_at > NOW)
        .values(visible_at=NOW)
    )


RETRY_NOW = retry_now_statement()


def _requeue(queue: Any, fields: Fields) -> str:
    ids = fields["ids"]
    requeued = queue.requeue_dead(None if ids is None else ids)
    return f"requeued {len(requeued)} dead job(s)"


def _retry_now(queue: Any, fields: Fields) -> str:
    with queue.engine.begin() as conn:
        changed = conn.execute(RETRY_NOW, {"job_id": fields["id"], "now": queue.now()}).rowcount
    return f"job {fields['id']} is ready now" if changed else f"job {fields['id']} was not waiting"


def _cancel(queue: Any, fields: Fields) -> str:
    if queue.cancel(fields["id"]):
        return f"job {fields['id']} is cancelled"
    return f"job {fields['id']} was not queued or running: left as it was"


def _purge(queue: Any, fields: Fields) -> str:
    purged = queue.purge(older_than=fields["older_than"], states=fields["states"])
    return f"purged {purged} finished job(s)"


def _ids(form: Mapping[str, Any]) -> dict[str, Any]:
    if _one(form, "all") == "1":
        return {"ids": None}
    ids = [validate.job_id(int(v)) for v in form.get("ids", [])]
    if not ids:
        raise ValueError("pick at least one dead job, or requeue all")
    return {"ids": ids}


def _job(form: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": validate.job_id(int(_one(form, "id")))}


def _purge_fields(form: Mapping[str, Any]) -> dict[str, Any]:
    states = [s for s in form.get("states", []) if s in PURGEABLE]
    if not states:
        raise ValueError(f"pick the finished states to purge: {', '.join(PURGEABLE)}")
    older_than = validate.non_negative_seconds("older_than", float(_one(form, "older_than")))
    return {"states": states, "older_than": older_than}


def _one(form: Mapping[str, Any], name: str) -> str:
    values = form.get(name) or [""]
    return str(values[0])


@dataclass(frozen=True)
class Action:
    name: str
    button: str
    #: Reads the submitted form (name -> list of values); raises ValueError when it is wrong.
    parse: Callable[[Mapping[str, Any]], dict[str, Any]]
    #: The question put to the person before anything changes.
    question: Callable[[Fields], str]
    run: Callable[[Any, Fields], str]


def _requeue_question(fields: Fields) -> str:
    ids = fields["ids"]
    if ids is None:
        return "Requeue every dead job, each with a fresh set of attempts?"
    return f"Requeue {len(ids)} dead job(s) ({', '.join(map(str, ids))}) with fresh attempts?"


def _purge_question(fields: Fields) -> str:
    states = " and ".join(fields["states"])
    return (
        f"Delete every {states} job that finished more than {fields['older_than']:g} s ago? "
        "This cannot be undone."
    )


ACTIONS = {
    action.name: action
    for action in (
        Action("requeue", "Requeue", _ids, _requeue_question, _requeue),
        Action(
            "retry",
            "Retry now",
            _job,
            lambda f: f"Make queued job {f['id']} ready now instead of after its wait?",
            _retry_now,
        ),
        Action(
            "cancel",
            "Cancel",
            _job,
            lambda f: (
                f"Cancel job {f['id']}? If it is running, its worker's report will be "
                "refused and its handler told that the job is lost."
            ),
            _cancel,
        ),
        Action("purge", "Purge", _purge_fields, _purge_question, _purge),
    )
}


def job_actions(state: str, waiting: bool) -> list[str]:
    """The actions a job page offers for a job in `state` (`waiting`: queued, not ready yet)."""
    if state == "dead":
        return ["requeue"]
    if state == "queued":
        return ["retry", "cancel"] if waiting else ["cancel"]
    if state == "running":
        return ["cancel"]
    return []
