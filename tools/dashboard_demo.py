#!/usr/bin/env python3
"""A dashboard to look at: a queue with an hour of simulated work, served on loopback.

    python tools/dashboard_demo.py                     serve it until Ctrl-C (prints the URL)
    python tools/dashboard_demo.py --actions           with redrive and cancel enabled
    python tools/dashboard_demo.py --screenshot docs/dashboard.png
                                                       take the README's screenshot in headless
                                                       chromium (selenium, system chromedriver)

The hour is simulated: the dashboard's clock is moved a minute at a time
while workers put, lease, ack and fail tasks, and the sampler takes a
reading each minute, so the throughput chart has something to show.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
for _dist in ("walqueue-cli", "walqueue-engine", "walqueue-format"):
    sys.path.insert(0, str(_ROOT / "packages" / _dist / "src"))

from walqueue import Queue  # noqa: E402
from walqueue.dashboard import Dashboard, serve_in_thread  # noqa: E402

START = 1_800_000_000
ERRORS = (
    ("TimeoutError", "POST https://hooks.example.org/orders timed out after 10 s"),
    ("HTTPError", "503 Service Unavailable from hooks.example.org"),
    ("ValueError", "payload field 'order' is not an int: '<script>alert(1)</script>'"),
)


class Clock:
    def __init__(self) -> None:
        self.now = float(START)

    def __call__(self) -> float:
        return self.now


def simulate(queue: Queue, app: Dashboard, clock: Clock, minutes: int = 60) -> None:
    """An hour of work: a wave of puts, workers acking most tasks and failing some."""
    rng = random.Random(7)
    number = 0
    for minute in range(minutes):
        now = int(clock.now)
        wave = int(40 + 30 * (1 + (minute % 20) / 10) * rng.random())
        tasks = []
        for _ in range(wave):
            number += 1
            kind = rng.choice(["email", "invoice", "resize", "webhook"])
            tasks.append({"task_id": f"{kind}-{number:05d}", "payload": {"kind": kind, "n": number}, "max_attempts": 2})
        queue.put_many(tasks)
        for lease in queue.reserve(f"worker-{minute % 4}", now=now, lease_seconds=300, limit=wave + 20):
            if lease.task_id.startswith("webhook") and rng.random() < 0.4:
                error = rng.choice(ERRORS)
                queue.release(lease, now=now, delay=30, error={"type": error[0], "message": error[1]})
            else:
                queue.ack(lease, now=now)
        app.sample()
        clock.now += 60
    now = int(clock.now)
    for task in queue.page("ready", limit=2) if hasattr(queue, "page") else queue.tasks("ready")[:2]:
        queue.cancel(task.task_id)
    for worker in ("worker-a", "worker-b"):
        queue.reserve(worker, now=now, lease_seconds=rng.choice([90, 240]), limit=3)
    app.sample()


def screenshot(url: str, path: str) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1500"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path="/usr/bin/chromedriver"))
    try:
        driver.get(url)
        time.sleep(2.5)
        driver.save_screenshot(path)
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--screenshot", metavar="PNG")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as place, Queue(Path(place) / "q", sync=True) as queue:
        queue.set_clock(1)  # the simulation's times are seconds: the store says so, and the dashboard reads them so
        clock = Clock()
        app = Dashboard(queue, actions=arguments.actions or bool(arguments.screenshot), clock=clock)
        simulate(queue, app, clock)
        running = serve_in_thread(app, "127.0.0.1", arguments.port)
        try:
            if arguments.screenshot:
                screenshot(running.url, arguments.screenshot)
                print(f"wrote {arguments.screenshot}")
                return 0
            print(f"dashboard on {running.url} (Ctrl-C to stop)")
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 130
        finally:
            running.stop()


if __name__ == "__main__":
    raise SystemExit(main())
