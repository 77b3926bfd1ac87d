"""Redrive and cancel from the dashboard: off unless enabled, a POST with the server's token, each one logged.

Why a token in the request and not a cookie: a cookie travels with any
cross-site form a hostile page submits, a token the page read from its own
origin does not (the classic synchronizer-token defence). The token is
random per server start, compared in constant time, and taken from the
``X-WALQueue-Token`` header or the ``token`` field. A request whose
``Origin`` names another host, or a name the dashboard does not accept
(walqueue.dashboard.hosts), is refused as well.

An action by error group works through the group's tasks in id order, at
most `ACTION_BATCH` per request and `GROUP_BUDGET` tasks read; the answer
says whether any are left (``more``) and where to resume (``after``, a
cursor the page or a script sends back), so that repeating it gets through
any number of tasks. A member is a task whose last error is the group's
error: a ready task that never failed belongs to no group. A task that changed meanwhile
(`WrongStatus`: a worker finished it, another operator redrove it) is
counted as skipped, never an error of the whole batch.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from walqueue import Task, WrongStatus
from walqueue.dashboard.api import GROUP_BUDGET, MAX_ID_CHARS
from walqueue.dashboard.hosts import HostRule
from walqueue.dashboard.routes import ACTION_FIELDS
from walqueue.dashboard.source import SCAN_CHUNK, Source, error_of, group_id
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


def check_origin(environ: Mapping[str, Any], hosts: HostRule) -> None:
    """403 when the browser says the request comes from another origin, or from a name not accepted."""
    origin = environ.get("HTTP_ORIGIN")
    if origin is None:
        return
    host = environ.get("HTTP_HOST")
    same = host is None or origin in (f"http://{host}", f"https://{host}")
    if not (same and hosts.allows_origin(origin)):
        raise HttpError(403, f"cross-origin action refused (Origin {origin[:100]!r})")


def _apply(source: Source, action: str, task_id: str, now: int, extra_attempts: int) -> None:
    try:
        if action == "redrive":
            source.backend.redrive(task_id, available_at=now, extra_attempts=extra_attempts)
        else:
            source.backend.cancel(task_id)
    finally:
        if source.on_commit is not None:
            source.on_commit()  # walqueue-serve's loop must see a commit made by this thread


def _is_member(task: Task, action: str, group: str) -> bool:
    """Whether `task` belongs to `group` for `action`: its last error is the group's error.

    A ready or leased task with no last error has never failed: it is no
    member of any group, "none" included, so that "cancel retrying" on the
    group of dead letters without an error never takes a fresh task.
    """
    error = error_of(task)
    if error is None and action == "cancel":
        return False
    return group_id(error) == group


def _parse_cursor(action: str, text: str | None) -> tuple[int, str | None]:
    """The ``after`` field (``STATUS:TASK_ID``, from a previous answer) as (index of the status, task id or None)."""
    if text is None:
        return 0, None
    status, colon, task_id = text.partition(":")
    statuses = ACTIONS[action]
    if not colon or status not in statuses or len(task_id) > MAX_ID_CHARS:
        raise HttpError(400, f"after must be STATUS:TASK_ID with a status of {', '.join(statuses)} (from an answer)")
    return statuses.index(status), task_id or None


def _group_members(source: Source, action: str, group: str, after: str | None) -> tuple[list[str], str | None]:
    """Up to `ACTION_BATCH` members of the group after the cursor, reading at most `GROUP_BUDGET` tasks.

    Returns the members and the cursor to resume from (``STATUS:TASK_ID``;
    ``STATUS:`` is that status from its start), or None when every task of
    the action's statuses was read. The cursor advances over what was read,
    matched or not, so repeated requests get past any number of tasks of
    other groups.
    """
    statuses = ACTIONS[action]
    index, last = _parse_cursor(action, after)
    members: list[str] = []
    read = 0
    while index < len(statuses):
        if read >= GROUP_BUDGET:
            return members, f"{statuses[index]}:{last or ''}"
        page = source.page(statuses[index], last, min(SCAN_CHUNK, GROUP_BUDGET - read))
        for task in page.tasks:
            read += 1
            last = task.task_id
            if _is_member(task, action, group):
                members.append(task.task_id)
                if len(members) >= ACTION_BATCH:
                    return members, f"{statuses[index]}:{last}"
        if page.next_after is None:
            index, last = index + 1, None
    return members, None


def _extra_attempts(fields: Mapping[str, str]) -> int:
    text = fields.get("extra_attempts", "1")
    if not (text.isascii() and text.isdigit() and len(text) <= 4) or not 1 <= int(text) <= 1000:
        raise HttpError(400, "extra_attempts must be an integer from 1 to 1000")
    return int(text)


def _checked_form(environ: Mapping[str, Any], token: str, hosts: HostRule, allowed: Iterable[str]) -> dict[str, str]:
    """An action's form, once its origin and token are checked and it holds no field but `allowed`."""
    check_origin(environ, hosts)
    fields = parse_form(environ)
    check_token(environ, fields, token)
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise HttpError(400, f"unknown field {unknown[0]!r}")
    return fields


def run_action(
    source: Source,
    action: str,
    environ: Mapping[str, Any],
    token: str,
    now: int,
    remote: Callable[[], str],
    hosts: HostRule,
) -> dict[str, Any]:
    """Check the request, apply the action to one task or one error group, log it, and say what happened."""
    fields = _checked_form(environ, token, hosts, ACTION_FIELDS)
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
        return {"ok": True, "action": action, "done": 1, "skipped": 0, "more": False, "after": None}
    assert group is not None
    members, resume = _group_members(source, action, group, fields.get("after"))
    done = skipped = 0
    for member in members:
        try:
            _apply(source, action, member, now, extra)
            done += 1
        except WrongStatus:
            skipped += 1
    log.warning("dashboard action %s group=%r done=%d skipped=%d from %s", action, group, done, skipped, remote())
    return {"ok": True, "action": action, "done": done, "skipped": skipped, "more": resume is not None, "after": resume}


def run_queue_action(
    source: Source,
    action: str,
    environ: Mapping[str, Any],
    token: str,
    remote: Callable[[], str],
    hosts: HostRule,
) -> dict[str, Any]:
    """Pause or resume one queue (lanes): the same origin and token checks as every action, then logged."""
    fields = _checked_form(environ, token, hosts, ("token", "queue"))
    name = fields.get("queue", "")
    try:
        source.backend.configure_queue(name, paused=QUEUE_ACTIONS[action])
    except (TypeError, ValueError) as error:
        raise HttpError(400, str(error)) from None
    log.warning("dashboard action %s queue=%r from %s", action, name, remote())
    return {"ok": True, "action": action, "done": 1, "skipped": 0, "more": False}
