"""The dashboard as a WSGI application over a real queue: what each route answers, and what it refuses."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from dashboard_helpers import NOW, call, form_headers, kill, post_action

from walqueue import Queue
from walqueue.dashboard import Dashboard
from walqueue.dashboard.api import GROUP_BUDGET
from walqueue.dashboard.source import group_id


def test_the_overview_counts_are_the_queues(app: Dashboard, queue: Queue) -> None:
    kill(queue, "gone")
    queue.put_many([{"task_id": f"t{i}", "payload": {}, "available_at": NOW - 30} for i in range(5)])
    queue.reserve("w", now=NOW, lease_seconds=60, limit=2)
    answer = call(app, "/api/overview")
    assert answer.status == 200
    overview = answer.json()
    assert overview["counts"] == queue.stats()["counts"]
    assert overview["oldest_ready_age"] == 30
    assert overview["next_available_at"] == NOW - 30
    assert overview["wal_bytes"] == queue.stats()["wal_bytes"]
    assert overview["last_seq"] == queue.last_seq


def test_leases_show_worker_deadline_and_time_left(app: Dashboard, queue: Queue) -> None:
    queue.put("job", {"a": 1})
    queue.reserve("worker-7", now=NOW - 10, lease_seconds=60)
    (task,) = call(app, "/api/leases").json()["tasks"]
    assert (task["task_id"], task["worker"], task["deadline"], task["time_left"]) == ("job", "worker-7", NOW + 50, 50)


def test_dead_letters_are_paged_by_cursor_in_id_order(app: Dashboard, queue: Queue) -> None:
    for i in range(7):
        kill(queue, f"d{i}")
    seen: list[str] = []
    after = ""
    while True:
        page = call(app, "/api/dead", query=f"limit=3&after={after}").json()
        assert len(page["tasks"]) <= 3
        seen.extend(task["task_id"] for task in page["tasks"])
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert seen == [f"d{i}" for i in range(7)]
    assert [t["task_id"] for t in call(app, "/api/dead", query="limit=3&page=3").json()["tasks"]] == ["d6"]


def test_dead_letters_are_grouped_by_their_last_error(app: Dashboard, queue: Queue) -> None:
    kill(queue, "a", error="KeyError")
    kill(queue, "b", error="KeyError")
    kill(queue, "c", error="TimeoutError")
    groups = call(app, "/api/dead/groups").json()
    assert [(group["type"], group["count"]) for group in groups["groups"]] == [("KeyError", 2), ("TimeoutError", 1)]
    assert groups["truncated"] is False
    (task,) = call(app, "/api/dead", query="limit=1").json()["tasks"]
    assert task["last_error"] == {"type": "KeyError", "message": "bad input", "attempt": 1, "at": NOW}
    group = groups["groups"][0]["group"]
    members = call(app, "/api/dead", query=f"group={group}").json()["tasks"]
    assert [member["task_id"] for member in members] == ["a", "b"]
    assert call(app, "/api/dead", query="group=0123456789abcdef").json()["tasks"] == []


def test_a_payload_holding_markup_comes_back_as_inert_json(app: Dashboard, queue: Queue) -> None:
    kill(queue, "x", {"html": "</script><script>alert(1)</script>&amp;"})
    answer = call(app, "/api/dead")
    assert b"<" not in answer.body and b">" not in answer.body and b"&" not in answer.body
    assert answer.headers["Content-Type"].startswith("application/json")
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    excerpt = answer.json()["tasks"][0]["payload_excerpt"]
    assert json.loads(excerpt) == {"html": "</script><script>alert(1)</script>&amp;"}


def test_the_page_and_its_assets_are_served_without_any_external_resource(app: Dashboard) -> None:
    page = call(app, "/")
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    assert b"http://" not in page.body.replace(b"http://www.w3.org", b"") and b"https://" not in page.body
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    for asset in ("/static/app.js", "/static/style.css", "/static/icon.svg"):
        answer = call(app, asset)
        assert answer.status == 200 and answer.body
        assert b"https://" not in answer.body
    assert b'content="off"' in page.body  # actions off: no token in the page
    assert b'name="walqueue-action-token" content=""' in page.body


@pytest.mark.parametrize(
    ("path", "query", "status"),
    [
        ("/nowhere", "", 404),
        ("/api/dead", "page=99999999999999999999", 400),
        ("/api/dead", "page=1000000", 400),
        ("/api/dead", "limit=0", 400),
        ("/api/dead", "limit=100000", 400),
        ("/api/dead", "limit=-1", 400),
        ("/api/dead", "limit=1e3", 400),
        ("/api/dead", "%zz", 400),
        ("/api/dead", "a=1&a=2", 400),
        ("/api/dead", "bogus=1", 400),
        ("/api/dead", "after=x&page=2", 400),
        ("/api/dead", "after=" + "x" * 2000, 400),
        ("/api/dead", "after=%ff%fe", 400),
        ("/api/dead", "&&&", 400),
        ("/api/leases", "limit=%00", 400),
        ("/api/overview", "x=1", 400),
        ("/metrics", "x", 400),
        ("/api/task", "", 400),
        ("/api/task", "id=nothing-here", 404),
        ("/api/actions/explode", "", 404),
    ],
)
def test_bad_input_gets_a_4xx_and_the_app_goes_on(
    app: Dashboard, queue: Queue, path: str, query: str, status: int
) -> None:
    queue.put("t", {})
    answer = call(app, path, query=query)
    assert answer.status == status
    assert answer.json()["ok"] is False and answer.json()["error"]
    assert call(app, "/api/overview").json()["counts"]["ready"] == 1


def test_reads_answer_get_only(app: Dashboard) -> None:
    answer = call(app, "/api/overview", method="POST", body=b"x", headers={"Content-Type": "text/plain"})
    assert answer.status == 405 and "GET" in answer.headers["Allow"]
    assert call(app, "/api/overview", method="HEAD").status == 200


def test_actions_are_refused_unless_enabled(app: Dashboard, queue: Queue) -> None:
    kill(queue, "d")
    answer = post_action(app, "redrive", "task_id=d")
    assert answer.status == 403
    assert queue.get("d").status == "dead"  # type: ignore[union-attr]


def test_an_action_needs_the_servers_token(acting: Dashboard, queue: Queue) -> None:
    kill(queue, "d")
    for token in (None, "", "wrong", acting.action_token + "x"):
        answer = call(acting, "/api/actions/redrive", method="POST", body=b"task_id=d", headers=form_headers(token))
        assert answer.status == 403
    assert queue.get("d").status == "dead"  # type: ignore[union-attr]
    answer = post_action(acting, "redrive", "task_id=d")
    assert answer.status == 200 and answer.json()["done"] == 1
    task = queue.get("d")
    assert task is not None and task.status == "ready" and task.available_at == NOW


def test_an_action_from_another_origin_is_refused_even_with_the_token(acting: Dashboard, queue: Queue) -> None:
    queue.put("t", {})
    headers = {**form_headers(acting.action_token), "Origin": "http://evil.example", "Host": "127.0.0.1:8080"}
    assert call(acting, "/api/actions/cancel", method="POST", body=b"task_id=t", headers=headers).status == 403
    assert queue.get("t").status == "ready"  # type: ignore[union-attr]


def test_the_token_may_travel_as_a_form_field_or_in_json(acting: Dashboard, queue: Queue) -> None:
    queue.put("a", {})
    queue.put("b", {})
    body = f"task_id=a&token={acting.action_token}".encode()
    assert call(acting, "/api/actions/cancel", method="POST", body=body, headers=form_headers(None)).status == 200
    body = json.dumps({"task_id": "b", "token": acting.action_token}).encode()
    headers = {"Content-Type": "application/json"}
    assert call(acting, "/api/actions/cancel", method="POST", body=body, headers=headers).status == 200
    assert [t.status for t in queue.tasks()] == ["dead", "dead"]


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"task_id=nobody", "application/x-www-form-urlencoded", 409),
        (b"", "application/x-www-form-urlencoded", 400),
        (b"task_id=a&group=b", "application/x-www-form-urlencoded", 400),
        (b"task_id=d&extra_attempts=0", "application/x-www-form-urlencoded", 400),
        (b"task_id=d&wat=1", "application/x-www-form-urlencoded", 400),
        (b"task_id=d", "text/plain", 415),
        (b"{", "application/json", 400),
        (b"[1]", "application/json", 400),
        (b'{"task_id": 5}', "application/json", 400),
        (b"x" * 70000, "application/x-www-form-urlencoded", 413),
    ],
)
def test_a_bad_action_changes_nothing(
    acting: Dashboard, queue: Queue, body: bytes, content_type: str, status: int
) -> None:
    kill(queue, "d")
    before = queue.last_seq
    headers = {"Content-Type": content_type, "X-WALQueue-Token": acting.action_token}
    answer = call(acting, "/api/actions/redrive", method="POST", body=body, headers=headers)
    assert answer.status == status
    assert queue.last_seq == before


def test_an_action_by_error_group_applies_to_every_member_and_is_logged(
    acting: Dashboard, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(5):
        kill(queue, f"d{i}")
    group = call(acting, "/api/dead/groups").json()["groups"][0]["group"]
    with caplog.at_level(logging.INFO, logger="walqueue.dashboard"):
        answer = post_action(acting, "redrive", f"group={group}")
    assert answer.json() == {"ok": True, "action": "redrive", "done": 5, "skipped": 0, "more": False, "after": None}
    assert queue.stats()["counts"]["dead"] == 0
    assert any("redrive" in record.getMessage() and group in record.getMessage() for record in caplog.records)


def _fail_once(queue: Queue, task_id: str, message: str = "flaky") -> None:
    """Put a task with attempts left, lease it and release it with an error: ready again, retrying."""
    queue.put(task_id, {}, max_attempts=5)
    (lease,) = queue.reserve("w", now=NOW, lease_seconds=60, limit=1)
    queue.release(lease, now=NOW, error={"type": "OSError", "message": message})


def _group_action(acting: Dashboard, action: str, body: str) -> dict[str, object]:
    answer = post_action(acting, action, body)
    assert answer.status == 200, answer.body
    result: dict[str, object] = answer.json()
    return result


def test_cancel_by_error_group_takes_the_ready_and_leased_members(acting: Dashboard, queue: Queue) -> None:
    _fail_once(queue, "r")
    _fail_once(queue, "l")
    queue.reserve("w", now=NOW, lease_seconds=60, limit=1)
    group = group_id({"type": "OSError", "message": "flaky"})
    assert _group_action(acting, "cancel", f"group={group}")["done"] == 2
    assert queue.stats()["counts"]["dead"] == 2


def test_cancel_by_error_group_never_takes_a_task_that_never_failed(acting: Dashboard, queue: Queue) -> None:
    kill(queue, "dead-without-error")
    queue.put_many([{"task_id": f"fresh{i}", "payload": {}} for i in range(3)])
    _fail_once(queue, "other", message="another error")
    for group in ("none", group_id({"type": "OSError", "message": "flaky"})):
        answer = _group_action(acting, "cancel", f"group={group}")
        assert (answer["done"], answer["more"]) == (0, False)
    assert queue.stats()["counts"]["dead"] == 1


def test_a_group_action_resumes_past_the_scan_budget_with_its_cursor(acting: Dashboard, queue: Queue) -> None:
    _fail_once(queue, "z-retrying")
    queue.put_many([{"task_id": f"a{i:05}", "payload": {}} for i in range(GROUP_BUDGET + 1)])
    group = group_id({"type": "OSError", "message": "flaky"})
    done, body, rounds = 0, f"group={group}", 0
    while True:
        rounds += 1
        assert rounds < 5, "the cursor does not advance"
        answer = _group_action(acting, "cancel", body)
        done += int(str(answer["done"]))
        if not answer["more"]:
            break
        body = f"group={group}&after={answer['after']}"
    assert done == 1 and queue.get("z-retrying").status == "dead"  # type: ignore[union-attr]
    assert queue.stats()["counts"]["dead"] == 1


def test_a_malformed_group_cursor_is_a_400(acting: Dashboard, queue: Queue) -> None:
    for after in ("dead:x", "nocolon", "ready:" + "x" * 2000):
        assert post_action(acting, "cancel", f"group=none&after={after}").status == 400


def test_an_access_token_guards_every_route(queue: Queue) -> None:
    token = "s3cret-token-of-sufficient-length"
    app = Dashboard(queue, access_token=token, clock=lambda: NOW)
    assert call(app, "/api/overview").status == 401
    assert call(app, "/metrics", headers={"Authorization": "Bearer nope"}).status == 401
    assert call(app, "/metrics", headers={"Authorization": f"Bearer {token}"}).status == 200
    assert call(app, "/login", query="token=wrong").status == 401
    login = call(app, "/login", query=f"token={token}")
    assert login.status == 303 and "HttpOnly" in login.headers["Set-Cookie"]
    cookie = login.headers["Set-Cookie"].split(";")[0]
    assert call(app, "/api/overview", headers={"Cookie": cookie}).status == 200
    with pytest.raises(ValueError):
        Dashboard(queue, access_token="short")


def test_a_closed_queue_is_a_503_not_a_crash(app: Dashboard, queue: Queue) -> None:
    queue.close()
    assert call(app, "/api/overview").status == 503
    assert call(app, "/api/dead").status == 503


def test_a_double_declaring_the_source_calls_is_paged_through_them(queue: Queue) -> None:
    class Double:
        """A backend that is not a `Queue`: a `QueueSource` by delegation, as a test double or a proxy is."""

        stats = queue.stats
        get = queue.get
        tasks = queue.tasks
        redrive = queue.redrive
        cancel = queue.cancel
        page = queue.page
        metrics = queue.metrics
        queues = queue.queues

    for i in range(4):
        kill(queue, f"d{i}")
    app = Dashboard(Double(), clock=lambda: NOW)  # type: ignore[arg-type]  # a partial double: the dashboard's calls
    page = call(app, "/api/dead", query="limit=3").json()
    assert [t["task_id"] for t in page["tasks"]] == ["d0", "d1", "d2"] and page["next_after"] == "d2"
    overview = call(app, "/api/overview").json()
    assert overview["bounded_reads"] is True and overview["counters"]["puts"] == 4
    assert call(app, "/metrics").status == 200


def test_ages_and_times_are_read_in_the_stores_clock_unit(tmp_path: Path) -> None:
    """A store in milliseconds (the default when none is recorded): ages in it, /metrics in seconds."""
    now_ms = NOW * 1000
    with Queue(tmp_path / "ms", sync=False) as queue:
        queue.put("overdue", {}, available_at=now_ms - 600_000)  # ten minutes overdue
        queue.put("leased", {})
        queue.reserve("w", now=now_ms, lease_seconds=30_000, limit=1)
        app = Dashboard(queue, clock=lambda: NOW)
        overview = call(app, "/api/overview").json()
        assert (overview["units_per_second"], overview["now"]) == (1000, now_ms)
        assert overview["oldest_ready_age"] == 600_000
        assert "walqueue_oldest_ready_age_seconds 600\n" in call(app, "/metrics").body.decode()
        [lease] = call(app, "/api/leases").json()["tasks"]
        assert (lease["deadline"], lease["time_left"]) == (now_ms + 30_000, 30_000)


def test_a_dead_letters_traceback_is_in_the_api_and_the_shells_json(app: Dashboard, queue: Queue) -> None:
    queue.put("broken", {}, max_attempts=1)
    (lease,) = queue.reserve("w", now=NOW, lease_seconds=60)
    queue.fail(lease, now=NOW, error={"type": "ValueError", "message": "bad", "traceback": "Traceback ...\nValueError"})
    [task] = call(app, "/api/dead").json()["tasks"]
    assert task["last_error"]["traceback"] == "Traceback ...\nValueError"
    assert call(app, "/api/task", query="id=broken").json()["task"]["last_error"]["traceback"].endswith("ValueError")
