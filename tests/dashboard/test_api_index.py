"""`GET /api/` lists the JSON API, and the list is true: every route answers, every field is the one served."""

from __future__ import annotations

from pathlib import Path

from dashboard_helpers import NOW, call, form_headers, kill

from walqueue import Queue
from walqueue.dashboard import Dashboard
from walqueue.dashboard.routes import ACTION_FIELDS, ROUTES, TASK_FIELDS
from walqueue.dashboard.source import task_view

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "dashboard-api.md"


def test_the_index_lists_every_route_with_its_fields(app: Dashboard) -> None:
    for path in ("/api/", "/api"):
        answer = call(app, path)
        assert answer.status == 200
        index = answer.json()
        assert [(r["method"], r["path"]) for r in index["routes"]] == [(r.method, r.path) for r in ROUTES]
    assert index["task_fields"] == list(TASK_FIELDS)
    assert set(index["action_fields"]) == {"task_id", "group", "after", "extra_attempts", "token"}
    assert index["actions_enabled"] is False


def test_every_api_route_of_the_app_is_in_the_index_and_answers(acting: Dashboard, queue: Queue) -> None:
    served = {path for path in acting._views() if path.startswith("/api/")} | {
        "/api/actions/redrive",
        "/api/actions/cancel",
        "/api/actions/pause",
        "/api/actions/resume",
    }
    assert served == {r.path for r in ROUTES}
    kill(queue, "d")
    queue.put("l", {})
    queue.reserve("w", now=NOW, lease_seconds=60)
    for entry in ROUTES:
        if entry.method == "GET":
            answer = call(acting, entry.path, query="id=d" if "id" in entry.fields else "")
        else:
            body = b"queue=mail" if entry.path.endswith(("/pause", "/resume")) else b"task_id=nobody"
            answer = call(acting, entry.path, method="POST", body=body, headers=form_headers(acting.action_token))
        assert answer.status in (200, 409), (entry.path, answer.body)
        if answer.status == 200 and entry.answer:
            assert set(answer.json()) <= set(entry.answer), entry.path


def test_a_query_field_the_index_does_not_list_is_refused(app: Dashboard) -> None:
    for entry in ROUTES:
        if entry.method == "GET":
            assert call(app, entry.path, query="unlisted=1").status == 400, entry.path


def test_a_task_view_has_exactly_the_listed_fields(queue: Queue) -> None:
    queue.put("t", {"a": 1})
    task = queue.get("t")
    assert task is not None
    assert tuple(task_view(task, NOW)) == TASK_FIELDS


def test_the_guide_documents_every_route_and_field() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for entry in ROUTES:
        assert f"`{entry.method} {entry.path}`" in text, entry.path
        for field in entry.fields:
            assert f"`{field}`" in text, (entry.path, field)
    for field in (*ACTION_FIELDS, *TASK_FIELDS):
        assert f"`{field}`" in text, field
    assert "421" in text and "--http-host" in text
