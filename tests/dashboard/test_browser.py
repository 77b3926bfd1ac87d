"""The dashboard page in a real browser: Debian's chromium, headless, driven by selenium (system chromedriver).

Selenium is given the chromedriver path, so it never looks one up or
downloads one. tools/_venv.sh installs chromium and chromium-driver when
it runs as root; these tests skip only when no browser can be had (not
installed, and not root to install it), and say so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_helpers import NOW, kill

from walqueue import Queue
from walqueue.dashboard import Dashboard, RunningServer, serve_in_thread

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-test.txt)")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(180)


def _browser() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def _find_or_install_browser() -> tuple[str, str]:
    found = _browser()
    if found is None and os.geteuid() == 0:
        # The test command installs it (tools/_venv.sh); pytest run directly as root does the same.
        script = f'. "{REPO_ROOT}/tools/_venv.sh" && walqueue_browser'
        subprocess.run(["bash", "-c", script], check=False, timeout=900)
        found = _browser()
        if found is None:
            pytest.fail("running as root, but chromium and chromium-driver could not be installed with apt-get")
    if found is None:
        pytest.skip(
            "no browser: chromium and chromium-driver are not installed, and only root may install them "
            "(run tools/test.sh as root, or apt-get install chromium chromium-driver)"
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, driver_path = _find_or_install_browser()
    os.environ["SE_OFFLINE"] = "true"  # belt and braces: selenium manager must never reach the network
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1400",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


class Clock:
    """The dashboard's clock, moved by the test (the chart's minutes)."""

    def __init__(self) -> None:
        self.now = float(NOW)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[[Dashboard], RunningServer]]:
    running: list[RunningServer] = []

    def start(app: Dashboard) -> RunningServer:
        server = serve_in_thread(app, "127.0.0.1", 0)
        running.append(server)
        browser.get(server.url)
        return server

    yield start
    for server in running:
        server.stop()


def until(condition: Callable[[], Any], what: str, seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def text_of(browser: Any, element_id: str) -> str:
    return str(browser.find_element(By.ID, element_id).text)


def test_the_counts_shown_are_the_queues(browser: Any, open_page: Any, queue: Queue) -> None:
    kill(queue, "dead-1")
    queue.put_many([{"task_id": f"t{i}", "payload": {"i": i}} for i in range(6)])
    queue.reserve("w", now=NOW, lease_seconds=60, limit=2)
    (lease,) = queue.reserve("w", now=NOW, lease_seconds=60, limit=1)
    queue.ack(lease, now=NOW)
    open_page(Dashboard(queue, clock=lambda: NOW))
    counts = queue.stats()["counts"]
    for status, count in counts.items():
        until(lambda s=status, c=count: text_of(browser, f"count-{s}") == str(c), f"{status} = {count}")
    assert counts == {"ready": 3, "leased": 2, "completed": 1, "dead": 1}
    rows = browser.find_elements(By.CSS_SELECTOR, "#leases tbody tr[data-task]")
    assert sorted(row.get_attribute("data-task") for row in rows) == ["t0", "t1"]
    assert "w" in rows[0].text


def test_a_dead_letter_appears_with_its_error(browser: Any, open_page: Any, queue: Queue) -> None:
    kill(queue, "poison", {"order": 42})
    open_page(Dashboard(queue, clock=lambda: NOW))
    row = until(lambda: browser.find_elements(By.CSS_SELECTOR, '#dead tbody tr[data-task="poison"]'), "the dead row")[0]
    assert "ValueError: bad input (attempt 1)" in row.text
    assert '{"order":42}' in row.text
    groups = browser.find_elements(By.CSS_SELECTOR, "#groups tbody tr[data-group]")
    assert len(groups) == 1 and "1" in groups[0].text


def test_the_chart_renders_the_throughput_per_minute(browser: Any, open_page: Any, queue: Queue) -> None:
    clock = Clock()
    app = Dashboard(queue, clock=clock)
    app.sample()
    queue.put_many([{"task_id": f"t{i}", "payload": {}} for i in range(5)])
    for lease in queue.reserve("w", now=NOW, lease_seconds=60, limit=3):
        queue.ack(lease, now=NOW)
    clock.now += 60
    app.sample()
    open_page(app)
    paths = until(lambda: browser.find_elements(By.CSS_SELECTOR, "#chart path.series"), "the chart's lines")
    assert sorted(path.get_attribute("data-series") for path in paths) == ["acks", "deaths", "puts", "releases"]
    totals = {path.get_attribute("data-series"): path.get_attribute("data-total") for path in paths}
    assert totals["puts"] == "5" and totals["acks"] == "3"
    puts = next(path for path in paths if path.get_attribute("data-series") == "puts")
    assert puts.get_attribute("d").startswith("M")
    assert puts.size["width"] > 0 or puts.size["height"] > 0


def _post_from_page(browser: Any, action: str, body: str, token: str | None) -> int:
    script = """
        const [action, body, token, done] = arguments;
        const headers = {"Content-Type": "application/x-www-form-urlencoded"};
        if (token !== null) headers["X-WALQueue-Token"] = token;
        fetch("api/actions/" + action, {method: "POST", headers: headers, body: body}).then(r => done(r.status));
    """
    return int(browser.execute_async_script(script, action, body, token))


def _button(browser: Any, row: str, action: str) -> Any:
    """The button of `action` in the row `row` (a CSS selector), once the page shows it."""
    selector = f'{row} button[data-action="{action}"]'
    return until(lambda: browser.find_elements(By.CSS_SELECTOR, selector), f"the {action} button")[0]


def _acting_page(browser: Any, open_page: Any, queue: Queue, row: str, action: str, body: str) -> tuple[Dashboard, Any]:
    """An acting dashboard on `queue`, opened, and its `action` button in `row`.

    Before any click, the same action posted from the page with a wrong
    token and with none is refused (403).
    """
    acting = Dashboard(queue, actions=True, clock=lambda: NOW)
    open_page(acting)
    button = _button(browser, row, action)
    for token in ("not-the-token", None):
        assert _post_from_page(browser, action, body, token) == 403
    return acting, button


def test_an_action_works_only_with_the_flag_and_the_token(browser: Any, open_page: Any, queue: Queue) -> None:
    kill(queue, "d")
    read_only = Dashboard(queue, clock=lambda: NOW)
    open_page(read_only)
    until(lambda: browser.find_elements(By.CSS_SELECTOR, '#dead tbody tr[data-task="d"]'), "the dead row")
    assert browser.find_elements(By.CSS_SELECTOR, "button.act") == []
    assert _post_from_page(browser, "redrive", "task_id=d", read_only.action_token) == 403
    assert queue.get("d").status == "dead"  # type: ignore[union-attr]

    _, button = _acting_page(browser, open_page, queue, '#dead tbody tr[data-task="d"]', "redrive", "task_id=d")
    assert queue.get("d").status == "dead"  # type: ignore[union-attr]
    button.click()
    until(lambda: queue.get("d").status == "ready", "the redrive")  # type: ignore[union-attr]
    until(lambda: "redrive: 1 done" in text_of(browser, "action-result"), "the action's result")


def test_a_payload_holding_script_renders_as_text(browser: Any, open_page: Any, queue: Queue) -> None:
    hostile = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    kill(queue, "<b>bold</b>", {"html": hostile})
    open_page(Dashboard(queue, actions=True, clock=lambda: NOW))
    row = until(lambda: browser.find_elements(By.CSS_SELECTOR, "#dead tbody tr[data-task]"), "the dead row")[0]
    assert "<script>window.pwned = 1</script>" in row.text
    assert "<b>bold</b>" in row.text
    assert browser.find_elements(By.CSS_SELECTOR, "#dead img, #dead script, #dead b") == []
    time.sleep(0.5)
    assert browser.execute_script("return window.pwned === undefined")


def test_cancel_retrying_on_a_group_reaches_past_many_fresh_tasks_in_one_click(
    browser: Any, open_page: Any, queue: Queue
) -> None:
    kill(queue, "d", error="OSError", message="flaky")
    queue.put("z-retrying", {}, max_attempts=5)
    (lease,) = queue.reserve("w", now=NOW, lease_seconds=60, limit=1)
    queue.release(lease, now=NOW, error={"type": "OSError", "message": "flaky"})
    queue.put_many([{"task_id": f"a{i:05}", "payload": {}} for i in range(10_001)])
    open_page(Dashboard(queue, actions=True, clock=lambda: NOW))
    button = until(
        lambda: browser.find_elements(By.CSS_SELECTOR, '#groups tbody tr[data-group] button[data-action="cancel"]'),
        "the group's cancel button",
    )[0]
    button.click()
    until(lambda: "cancel: 1 done" in text_of(browser, "action-result"), "the group action's result")
    assert queue.get("z-retrying").status == "dead"  # type: ignore[union-attr]
    assert queue.stats()["counts"]["ready"] == 10_001  # no fresh task was taken


def test_a_workers_lease_shows_a_real_date_and_time_left_and_a_real_oldest_age(
    browser: Any, open_page: Any, tmp_path: Path
) -> None:
    """The worker counts milliseconds; the dashboard reads the store's unit, so its dates are this year's."""
    import threading
    from datetime import UTC, datetime

    from walqueue.worker import Worker

    started, release = threading.Event(), threading.Event()

    def handle(payload: dict[str, Any], context: Any) -> None:
        started.set()
        release.wait(60)

    with Queue(tmp_path / "ms", sync=False) as queue:
        now_ms = time.time_ns() // 1_000_000
        queue.put("overdue", {}, available_at=now_ms - 10 * 60_000)  # ten minutes overdue, no worker for it yet
        worker = Worker(queue, handle, lease=120_000, prefetch=0, concurrency=1)
        worker.start()
        try:
            until(started.is_set, "the worker to lease the task")
            assert queue.stats()["clock"] == 1000  # the worker recorded its unit
            queue.put("waiting", {}, available_at=now_ms - 10 * 60_000)
            open_page(Dashboard(queue))  # the real clock
            row = until(lambda: browser.find_elements(By.CSS_SELECTOR, "#leases tbody tr[data-task]"), "a lease row")[0]
            year = str(datetime.now(UTC).year)
            cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            assert cells[2].startswith(year), cells  # the deadline: a date of this year, not of the year 58899
            assert re.fullmatch(r"1m [45]\ds|2m 0s", cells[3]), cells  # about two minutes left, not 20772190d
            until(lambda: text_of(browser, "oldest-age").startswith("10m"), "an oldest ready age of ten minutes")
        finally:
            release.set()
            worker.stop(now=True)
            worker.wait(30)


def test_a_dead_letters_traceback_is_shown_as_text_under_its_error(browser: Any, open_page: Any, queue: Queue) -> None:
    queue.put("broken", {}, max_attempts=1)
    (lease,) = queue.reserve("w", now=NOW, lease_seconds=60)
    trace = 'Traceback (most recent call last):\n  File "app.py", line 9, in handle\nValueError: <b>bad</b>\n'
    queue.fail(lease, now=NOW, error={"type": "ValueError", "message": "bad", "traceback": trace})
    open_page(Dashboard(queue, clock=lambda: NOW))
    row = until(lambda: browser.find_elements(By.CSS_SELECTOR, '#dead tbody tr[data-task="broken"]'), "the dead row")[0]
    row.find_element(By.TAG_NAME, "summary").click()
    shown = row.find_element(By.CSS_SELECTOR, "pre.traceback").text
    assert "line 9, in handle" in shown and "ValueError: <b>bad</b>" in shown  # as text, never markup
    assert row.find_elements(By.TAG_NAME, "b") == []


def test_the_queues_table_shows_each_queue_and_pauses_it_only_with_the_flag_and_the_token(
    browser: Any, open_page: Any, queue: Queue
) -> None:
    queue.put_many([{"task_id": f"m{i}", "payload": {}, "queue": "mail", "available_at": NOW - 30} for i in range(3)])
    queue.put("b0", {}, queue="bulk")
    queue.configure_queue("bulk", concurrency=2, rate=(10, 1))
    read_only = Dashboard(queue, clock=lambda: NOW)
    open_page(read_only)
    row = until(lambda: browser.find_elements(By.CSS_SELECTOR, '#queues tbody tr[data-queue="mail"]'), "mail")[0]
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:5] == ["mail", "3", "0", "0", "0"] and cells[7] == "running"
    assert cells[5] != "–"  # its oldest ready task's age
    bulk = browser.find_element(By.CSS_SELECTOR, '#queues tbody tr[data-queue="bulk"]')
    assert "at most 2 at once, 10 per 1" in bulk.text
    assert browser.find_elements(By.CSS_SELECTOR, "#queues button.act") == []
    assert _post_from_page(browser, "pause", "queue=mail", read_only.action_token) == 403  # actions off

    mail = '#queues tr[data-queue="mail"]'
    acting, button = _acting_page(browser, open_page, queue, mail, "pause", "queue=mail")
    assert _post_from_page(browser, "pause", "queue=a%2Cb", acting.action_token) == 400
    assert not [q for q in queue.queues() if q["paused"]]
    button.click()
    until(lambda: [q["name"] for q in queue.queues() if q["paused"]] == ["mail"], "the pause")
    resume = _button(browser, mail, "resume")
    assert queue.reserve("w", now=NOW, lease_seconds=60, queues=["mail"]) == []
    resume.click()
    until(lambda: not [q for q in queue.queues() if q["paused"]], "the resume")


def test_the_oldest_age_counts_from_the_put_and_undated_tasks_are_counted_apart(
    browser: Any, open_page: Any, tmp_path: Path
) -> None:
    """No age from 1970: a put with no time is "undated"; a stamped one ages from its put, in the store's unit."""
    with Queue(tmp_path / "ms", sync=False) as queue:
        queue.set_clock(1000)  # milliseconds, as a worker records
        queue.put("undated", {})  # no available_at, no put time
        queue.put("stamped", {}, put_at=time.time_ns() // 1_000_000 - 90_000)  # put 90 s ago (a client stamps now)
        open_page(Dashboard(queue))  # the real clock
        until(lambda: re.fullmatch(r"1m 3\ds \(1 undated: no put time\)", text_of(browser, "oldest-age")), "1m 30s")
        row = until(lambda: browser.find_elements(By.CSS_SELECTOR, '#queues tbody tr[data-queue="default"]'), "row")[0]
        assert re.fullmatch(r"1m 3\ds", row.find_elements(By.TAG_NAME, "td")[5].text)  # not 25h: the unit converted
