"""Redrive and cancel from the dashboard: off unless enabled, a POST with the server's token, each one logged.

Why a token in the request and not a cookie: a cookie travels with any
cross-site form a hostile page submits, a token the page read from its own
origin does not (the classic synchronizer-token defence). The token is
random per server start, compared in constant time, and taken from the
``X-WALQueue-Token`` header or the ``token`` field. A request whose
``Origin`` names another host is refused as well.

An action by error group works through the group's tasks in id order, at
most `ACTION_BATCH` per request; the answer says whether any are left, so
that the page (or a script) repeats it. A task that changed meanwhile
(`WrongStatus`: a worker finished it, another operator redrove it) is
counted as skipped, never an error of the whole batch.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from walqueue import WrongStatus
from walqueue.dashboard.api import GROUP_BUDGET, MAX_ID_CHARS
from walqueue.dashboard.source import Source, error_of, group_id
from walqueue.dashboard.web import HttpError, parse_form

__all__ = [
    "ACTION_BATCH",
    "ACTIONS",
    "QUEUE_ACTIONS",
    "TOKEN_HEADER",
    "check_origin",
    "check_token",
    "run_action",
    "run_queue_action",
]

log = logging.getLogger("walqueue.dashboard")

#: The most tasks one group action changes per request.
ACTION_BATCH: Final = 1000
#: The header (WSGI spelling) that carries the token.
TOKEN_HEADER: Final = "HTTP_X_WALQUEUE_TOKEN"

#: Which statuses each action applies to.
ACTIONS: Final[Mapping[str, tuple[str, ...]]] = {"redrive": ("dead",), "cancel": ("ready", "leased")}
#: The actions on a queue (lanes): each sets its `paused` setting.
QUEUE_ACTIONS: Final[Mapping[str, bool]] = {"pause": True, "resume": False}


def check_token(environ: Mapping[str, Any], fields: Mapping[str, str], token: str) -> None:
    """403 unless the request carries `token` (header or field)."""
    given = environ.get(TOKEN_HEADER) or fields.get("token") or ""
    if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8")):
        raise HttpError(403, "missing or wrong action token (reload the page to get the current one)")


def check_origin(environ: Mapping[str, Any]) -> None:
    """403 when the browser says the request comes from a page of another origin."""
    origin = environ.get("HTTP_ORIGIN")
    if origin is None:
        return
    host = environ.get("HTTP_HOST", "")
    if origin not in (f"http://{host}", f"https://{host}"):
        raise HttpError(403, f"cross-origin action refused (Origin {origin[:100]!r})")


def _apply(source: Source, action: str, task_id: str, now: int, extra_attempts: int) -> None:
    if action == "redrive":
        source.backend.redrive(task_id, available_at=now, extra_attempts=extra_attempts)
    else:
        source.backend.cancel(task_id)


def _group_members(source: Source, action: str, group: str) -> tuple[list[str], bool]:
    """Up to `ACTION_BATCH` ids of the group's tasks in the action's statuses, and whether more may be left."""
    tasks, truncated = source.scan(ACTIONS[action], GROUP_BUDGET)
    members = [task.task_id for task in tasks if group_id(error_of(task)) == group]
    return members[:ACTION_BATCH], truncated or len(members) > ACTION_BATCH


def _extra_attempts(fields: Mapping[str, str]) -> int:
    text = fields.get("extra_attempts", "1")
    if not (text.isascii() and text.isdigit() and len(text) <= 4) or not 1 <= int(text) <= 1000:
        raise HttpError(400, "extra_attempts must be an integer from 1 to 1000")
    return int(text)


def run_action(
    source: Source,
    action: str,
    environ: Mapping[str, Any],
    token: str,
    now: int,
    remote: Callable[[], str],
) -> dict[str, Any]:
    """Check the request, apply the action to one task or one error group, log it, and say what happened."""
    check_origin(environ)
    fields = parse_form(environ)
    check_token(environ, fields, token)
    unknown = sorted(set(fields) - {"token", "task_id", "group", "extra_attempts"})
    if unknown:
        raise HttpError(400, f"unknown field {unknown[0]!r}")
    task_id, group = fields.get("task_id"), fields.get("group")
    if (task_id is None) == (group is None):
        raise HttpError(400, "give exactly one of task_id and group")
    extra = _extra_attempts(fields)
    if task_id is not None:
        if not task_id or len(task_id) > MAX_ID_CHARS:
            raise HttpError(400, f"task_id must be 1 to {MAX_ID_CHARS} characters")
        try:
            _apply(source, action, task_id, now, extra)
        except WrongStatus as error:
            raise HttpError(409, str(error)) from None
        except (TypeError, ValueError) as error:
            raise HttpError(400, str(error)) from None
        log.warning("dashboard action %s task_id=%r from %s", action, task_id, remote())
        return {"ok": True, "action": action, "done": 1, "skipped": 0, "more": False}
    assert group is not None
    members, more = _group_members(source, action, group)
    done = skipped = 0
    for member in members:
        try:
            _apply(source, action, member, now, extra)
            done += 1
        except WrongStatus:
            skipped += 1
    log.warning("dashboard action %s group=%r done=%d skipped=%d from %s", action, group, done, skipped, remote())
    return {"ok": True, "action": action, "done": done, "skipped": skipped, "more": more}


def run_queue_action(
    source: Source, action: str, environ: Mapping[str, Any], token: str, remote: Callable[[], str]
) -> dict[str, Any]:
    """Pause or resume one queue (lanes): the same origin and token checks as every action, then logged."""
    check_origin(environ)
    fields = parse_form(environ)
    check_token(environ, fields, token)
    unknown = sorted(set(fields) - {"token", "queue"})
    if unknown:
        raise HttpError(400, f"unknown field {unknown[0]!r}")
    configure = getattr(source.backend, "configure_queue", None)
    if configure is None:
        raise HttpError(404, "this backend has no queues to pause")
    name = fields.get("queue", "")
    try:
        configure(name, paused=QUEUE_ACTIONS[action])
    except (TypeError, ValueError) as error:
        raise HttpError(400, str(error)) from None
    log.warning("dashboard action %s queue=%r from %s", action, name, remote())
    return {"ok": True, "action": action, "done": 1, "skipped": 0, "more": False}
