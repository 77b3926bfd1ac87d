"""`walqueue-serve DIR --socket PATH --http 127.0.0.1:PORT`: the dashboard beside the socket, and its refusals."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from dashboard_helpers import refused_start, served_dashboard

from walqueue.client import Client

pytestmark = pytest.mark.timeout(120)


def test_the_server_serves_its_dashboard_metrics_and_api(src_pythonpath: str, place: Path) -> None:
    with served_dashboard(src_pythonpath, place) as url:
        assert url.startswith("http://127.0.0.1:"), url
        with Client(str(place / "s")) as client:
            client.put("a", {"<script>": 1})
            client.put("b", {})
        with urllib.request.urlopen(url + "api/overview", timeout=30) as answer:
            assert json.loads(answer.read())["counts"]["ready"] == 2
        with urllib.request.urlopen(url + "metrics", timeout=30) as answer:
            text = answer.read().decode()
        assert 'walqueue_tasks{status="ready"} 2' in text and "walqueue_puts_total 2" in text
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert b'content="off"' in answer.read()  # no actions without --http-actions


@pytest.mark.parametrize(
    "options",
    [
        ("--http", "0.0.0.0:0"),
        ("--http", "0.0.0.0:0", "--http-allow-remote"),
        ("--http", "nowhere"),
        ("--http-actions",),
    ],
)
def test_an_unsafe_or_malformed_http_option_is_a_usage_error(
    src_pythonpath: str, place: Path, options: tuple[str, ...]
) -> None:
    status, err = refused_start(src_pythonpath, place, *options)
    assert status == 64, err
    assert "--http" in err
    assert not (place / "q").exists() and not (place / "s").exists()  # nothing created


def test_an_action_from_the_dashboard_wakes_a_wait_parked_in_the_server(src_pythonpath: str, place: Path) -> None:
    """The dashboard's actions commit from its own thread, not the event loop: a parked wait still sees them."""
    with served_dashboard(src_pythonpath, place, "--http-actions", log_level="ERROR") as url:
        with urllib.request.urlopen(url, timeout=30) as answer:
            page = answer.read().decode()
        token = page.split('name="walqueue-action-token" content="', 1)[1].split('"', 1)[0]
        with Client(str(place / "s")) as producer:
            producer.put("victim", {})
        woke: list[tuple[bool, float]] = []

        def wait_for_a_commit() -> None:
            with Client(str(place / "s")) as waiter:
                waiter.stats()  # what this connection has seen: everything so far
                started = time.monotonic()
                woke.append((waiter.wait(30.0), time.monotonic() - started))

        thread = threading.Thread(target=wait_for_a_commit)
        thread.start()
        time.sleep(0.5)  # parked in the loop by now
        request = urllib.request.Request(
            url + "api/actions/cancel",
            data=b"task_id=victim",
            headers={"Content-Type": "application/x-www-form-urlencoded", "X-WALQueue-Token": token},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.loads(answer.read())["done"] == 1
        thread.join(60)
        assert woke and woke[0][0] is True, woke
        assert woke[0][1] < 20.0, woke  # woken by the commit, not by its 30 s deadline


def test_the_served_dashboards_metrics_show_request_seconds_by_op(src_pythonpath: str, place: Path) -> None:
    with served_dashboard(src_pythonpath, place) as url:
        with Client(str(place / "s")) as client:
            client.put("a", {})
            client.put("b", {})
            assert client.get("a") is not None
        with urllib.request.urlopen(url + "metrics", timeout=30) as answer:
            text = answer.read().decode()
    assert "# TYPE walqueue_request_seconds histogram" in text
    assert 'walqueue_request_seconds_count{op="put"} 2' in text
    assert 'walqueue_request_seconds_count{op="get"} 1' in text
    assert 'walqueue_request_seconds_bucket{op="put",le="+Inf"} 2' in text


def _read(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


def test_the_readme_flow_shows_ages_in_seconds_never_the_seconds_since_1970(src_pythonpath: str, place: Path) -> None:
    """The README's producer (Client.put, no available_at), no worker running: ages count from the put."""
    from prometheus_client.parser import text_string_to_metric_families

    with served_dashboard(src_pythonpath, place) as url:
        with Client(str(place / "s")) as client:
            client.put("early", {})  # no worker has ever started: the store has no unit, so no put time
            overview = json.loads(_read(url + "api/overview"))
            assert overview["oldest_ready_age"] is None and overview["undated_ready"] == 1
            assert "walqueue_oldest_ready_age_seconds" not in _read(url + "metrics")
            client.set_clock(1000)  # what walqueue-worker does at its first start (then it stopped)
        with Client(str(place / "s")) as client:
            client.put("email-1", {"to": "ada@example.org"}, key="signup-ada")
            time.sleep(0.05)
            assert client.get("email-1").available_at > 1_700_000_000_000  # due from its put time
        overview = json.loads(_read(url + "api/overview"))
        assert 0 <= overview["oldest_ready_age"] < 60_000 and overview["undated_ready"] == 1  # ms, the store's unit
        families = {f.name: f for f in text_string_to_metric_families(_read(url + "metrics"))}
        [age] = families["walqueue_oldest_ready_age_seconds"].samples
        assert 0 <= age.value < 60  # seconds since the put, not ~1.7e9
        [undated] = families["walqueue_undated_ready_tasks"].samples
        assert undated.value == 1
        queues = json.loads(_read(url + "api/queues"))["queues"]
        assert 0 <= queues[0]["oldest_ready_age"] < 60_000 and queues[0]["undated_ready"] == 1
        puts = {s.labels["queue"]: s.value for s in families["walqueue_queue_puts"].samples}
        assert puts == {"default": 2}
