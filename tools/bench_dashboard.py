#!/usr/bin/env python3
"""The dashboard on a queue of a million tasks: every page in bounded time and size.

    python tools/bench_dashboard.py                   1,000,000 tasks (100,000 dead, 50,000 leased)
    python tools/bench_dashboard.py --tasks 100000    a smaller queue (the dead and leased scale with it)
    python tools/bench_dashboard.py --json out.json   also write every figure as JSON
    python tools/bench_dashboard.py --served          the server's request path with and without a
                                                      dashboard polled every second (see below)
    python tools/bench_dashboard.py --served-cpu 20   the server's own CPU per second, idle, with and
                                                      without a dashboard polled every second

Each route of the dashboard is called through its WSGI interface (no
sockets: the figures are the app's and the queue's), `--reps` times, and
the median seconds and the answer's bytes are reported. The peer, measured
in the same run on the same queue: the unbounded read a dashboard without
paging would make, `Queue.tasks(status)` for the same status. A page's
figures do not depend on its depth (a cursor, never an offset), and its
size is bounded by its limit; the ratio to the whole read is the saving.
Nothing here is a test: the targets are printed as met / NOT MET.

--served: 4 client processes make durable puts, then reserve+ack cycles,
through one walqueue-serve, with nobody watching and with a dashboard that a
poller reads every second (the page's five API calls: overview, throughput,
leases, error groups, dead letters). The dashboard is walqueue-serve's own
(``--http``) when the server has the option, else a separate process
serving `Dashboard(Client(socket))`. The two configurations alternate per
repetition; the ratio watched/unwatched of each phase's throughput is the
figure (target: at least 0.97).
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

_ROOT = Path(__file__).resolve().parent.parent
for _dist in ("walqueue-cli", "walqueue-engine", "walqueue-format"):
    sys.path.insert(0, str(_ROOT / "packages" / _dist / "src"))

from walqueue import Queue  # noqa: E402
from walqueue.dashboard import Dashboard  # noqa: E402

NOW = 1_000
#: Polls a watched repetition must see to count (a phase shorter than the poll interval measures nothing).
MIN_POLLS = 3
#: The largest answer any page may give (a page of 50 tasks with payload excerpts is a few KiB).
MAX_ANSWER_BYTES = 256 * 1024


def build(directory: Path, tasks: int, dead: int, leased: int) -> Queue:
    """A queue with `dead` dead letters, `leased` leases and the rest ready but not yet due."""
    queue = Queue(directory, sync=False, compact_bytes=None)
    batch = 10_000

    def put(prefix: str, count: int, **fields: Any) -> None:
        for start in range(0, count, batch):
            queue.put_many(
                {"task_id": f"{prefix}{i:07d}", "payload": {"i": i, "note": "x" * 40}, **fields}
                for i in range(start, min(count, start + batch))
            )

    put("d", dead, max_attempts=1)
    while leases := queue.reserve("killer", now=NOW, lease_seconds=60, limit=batch):
        for lease in leases:
            queue.release(lease, now=NOW)
    put("l", leased, available_at=1)
    while queue.reserve("worker", now=NOW, lease_seconds=10**6, limit=batch):
        pass
    put("r", tasks - dead - leased, available_at=NOW * 10)
    return queue


def call(app: Dashboard, path: str, query: str = "") -> tuple[int, int]:
    environ = {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
    }
    status: list[int] = []
    body = b"".join(app(environ, lambda line, headers, *_: status.append(int(line.split()[0]))))
    return status[0], len(body)


def timed(function: Callable[[], Any], reps: int) -> tuple[float, Any]:
    samples = []
    result = None
    for _ in range(reps):
        start = time.perf_counter()
        result = function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


POLLED = (
    "api/overview",
    "api/throughput",
    "api/leases?limit=20",
    "api/dead/groups",
    "api/dead?limit=20",
)


def _environment() -> dict[str, str]:
    import os

    env = dict(os.environ)
    roots = [str(_ROOT / "packages" / dist / "src") for dist in ("walqueue-cli", "walqueue-engine", "walqueue-format")]
    env["PYTHONPATH"] = os.pathsep.join(roots)
    return env


def _client_process(socket_path: str, prefix: str, count: int, barrier: Any, results: Any) -> None:
    from walqueue.client import Client

    with Client(socket_path, timeout=120) as client:
        barrier.wait()
        put_start = time.perf_counter()
        for i in range(count):
            client.put(f"{prefix}-{i}", {"i": i, "note": "x" * 40})
        put_end = time.perf_counter()
        barrier.wait()
        cycle_start = time.perf_counter()
        done = 0
        while done < count:
            for lease in client.reserve(f"w-{prefix}", now=NOW, lease_seconds=600, limit=1):
                client.ack(lease, now=NOW + 1)
                done += 1
        results.put((put_start, put_end, cycle_start, time.perf_counter()))


def _phases(socket_path: str, processes: int, total: int) -> tuple[float, float]:
    from bench.harness import run_forked  # tools/ is this script's directory, so on its path

    spans = run_forked(_client_process, (socket_path,), processes, total // processes)
    puts = max(span[1] for span in spans) - min(span[0] for span in spans)
    cycles = max(span[3] for span in spans) - min(span[2] for span in spans)
    return total / puts, total / cycles


class _Watched:
    """walqueue-serve on a fresh directory; with `dashboard`, a dashboard of it and a poller reading it every second."""

    def __init__(self, place: Path, dashboard: bool) -> None:
        import subprocess
        import threading

        self.socket_path = str(place / "s")
        command = [sys.executable, "-m", "walqueue.serve", str(place / "q"), "--socket", self.socket_path]
        self.inside = (
            dashboard
            and "--http"
            in subprocess.run([*command[:3], "--help"], capture_output=True, text=True, env=_environment()).stdout
        )
        if self.inside:
            command += ["--http", "127.0.0.1:0"]
        self.processes = [
            subprocess.Popen([*command, "--log-level", "WARNING"], stdout=subprocess.PIPE, env=_environment())
        ]
        self.url = self._wait_for_lines(self.processes[0], dashboard and self.inside)
        if dashboard and not self.inside:
            script = (
                "import sys, time\n"
                "from walqueue.client import Client\n"
                "from walqueue.dashboard import Dashboard, serve_in_thread\n"
                "app = Dashboard(Client(sys.argv[1]))\n"
                "running = serve_in_thread(app, '127.0.0.1', 0, sample=app.sample)\n"
                "print('dashboard on', running.url, flush=True)\n"
                "time.sleep(10**6)\n"
            )
            outside = subprocess.Popen(
                [sys.executable, "-c", script, self.socket_path], stdout=subprocess.PIPE, env=_environment()
            )
            self.processes.append(outside)
            self.url = self._wait_for_lines(outside, True)
        self.stopping = threading.Event()
        self.polls = 0
        self.poller = threading.Thread(target=self._poll, daemon=True) if dashboard else None
        if self.poller is not None:
            self.poller.start()

    @staticmethod
    def _wait_for_lines(process: Any, want_url: bool) -> str | None:
        url = None
        for _ in range(3):
            line = process.stdout.readline().decode()
            if not line:
                raise RuntimeError("the server (or its dashboard) did not start")
            if "dashboard on" in line:
                url = line.split("dashboard on", 1)[1].split()[0]
            if url or not want_url:
                return url
        raise RuntimeError("no dashboard URL was printed")

    def _poll(self) -> None:
        import urllib.request

        assert self.url is not None
        while not self.stopping.wait(1.0):
            for path in POLLED:
                with urllib.request.urlopen(self.url + path, timeout=30) as answer:
                    answer.read()
            self.polls += 1

    def stop(self) -> None:
        self.stopping.set()
        if self.poller is not None:
            self.poller.join(60)
        for process in reversed(self.processes):
            process.terminate()
            process.wait(60)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (/proc/PID/stat, in clock ticks)."""
    import os

    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def served_cpu(seconds: float, reps: int) -> dict[str, Any]:
    """The server's own CPU per second with no client: without a dashboard, and with one polled every second.

    The difference is what watching costs the request path at most (the
    loop and the dashboard share one process and its GIL); it does not
    depend on how loaded the machine is, which throughput ratios do.
    """
    import shutil

    per_second: dict[str, list[float]] = {"unwatched": [], "watched": []}
    for rep in range(reps):
        for mode in ("unwatched", "watched") if rep % 2 == 0 else ("watched", "unwatched"):
            place = Path(tempfile.mkdtemp(prefix="wq-dash-", dir="/tmp"))
            watched = _Watched(place, mode == "watched")
            try:
                time.sleep(1.0)  # past start-up
                pid = watched.processes[0].pid
                before, start = _cpu_seconds(pid), time.monotonic()
                time.sleep(seconds)
                used = (_cpu_seconds(pid) - before) / (time.monotonic() - start)
            finally:
                watched.stop()
                shutil.rmtree(place, ignore_errors=True)
            per_second[mode].append(used)
            polls = f" ({watched.polls} polls)" if mode == "watched" else ""
            print(f"  rep {rep} {mode:9}: server CPU {used * 1000:6.2f} ms per second{polls}", flush=True)
    cost = statistics.median(per_second["watched"]) - statistics.median(per_second["unwatched"])
    print(f"  watching costs the server {cost * 1000:.2f} ms of CPU per second ({cost:.2%} of one core)")
    return {"server_cpu_per_second": per_second, "watching_costs_cpu_per_second": cost}


def served(reps: int, total: int, processes: int = 4, min_polls: int = MIN_POLLS) -> dict[str, Any]:
    """The server's throughput with and without a polled dashboard, alternating per repetition."""
    import shutil

    rates: dict[str, dict[str, list[float]]] = {
        "unwatched": {"puts": [], "cycles": []},
        "watched": {"puts": [], "cycles": []},
    }
    inside = False
    for rep in range(reps):
        for mode in ("unwatched", "watched") if rep % 2 == 0 else ("watched", "unwatched"):
            place = Path(tempfile.mkdtemp(prefix="wq-dash-", dir="/tmp"))
            watched = _Watched(place, mode == "watched")
            inside = inside or watched.inside
            try:
                puts, cycles = _phases(watched.socket_path, processes, total)
            finally:
                watched.stop()
                shutil.rmtree(place, ignore_errors=True)
            if mode == "watched" and watched.polls < min_polls:
                raise RuntimeError(
                    f"the dashboard was polled {watched.polls} times (fewer than {min_polls}) while it was"
                    " watched: the phases are too short to measure anything; give --ops more"
                )
            rates[mode]["puts"].append(puts)
            rates[mode]["cycles"].append(cycles)
            print(
                f"  rep {rep} {mode:9}: {puts:8,.0f} puts/s {cycles:8,.0f} cycles/s"
                + (f" ({watched.polls} polls)" if mode == "watched" else "")
            )
    figures: dict[str, Any] = {"dashboard": "walqueue-serve --http" if inside else "a separate process (Client)"}
    for phase in ("puts", "cycles"):
        ratios = [w / u for w, u in zip(rates["watched"][phase], rates["unwatched"][phase], strict=True)]
        ratio = statistics.median(ratios)
        figures[f"{phase}_watched_vs_unwatched"] = ratio
        verdict = "met" if ratio >= 0.97 else "NOT MET"
        print(
            f"  {phase}: watched / unwatched = {ratio:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f});"
            f" target >= 0.97: {verdict}"
        )
    figures["rates"] = rates
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--dir", default=None, help="where the store goes (default: the system temp dir)")
    parser.add_argument("--served", action="store_true", help="measure the server with and without a polled dashboard")
    parser.add_argument(
        "--served-cpu",
        type=float,
        metavar="SECONDS",
        help="measure the server's own CPU per second over SECONDS, idle, with and without a polled dashboard",
    )
    parser.add_argument(
        "--ops",
        type=int,
        default=16_000,
        help="--served: operations per phase (default 16,000: seconds, so that the poller polls)",
    )
    parser.add_argument(
        "--min-polls",
        type=int,
        default=MIN_POLLS,
        help=f"--served: polls a watched repetition must see to count (default {MIN_POLLS}; 0 for a smoke run)",
    )
    arguments = parser.parse_args(argv)
    if arguments.served_cpu:
        print(f"walqueue-serve with no client, {arguments.served_cpu:g} s per repetition, {arguments.reps} repetitions")
        figures = served_cpu(arguments.served_cpu, arguments.reps)
        if arguments.json:
            Path(arguments.json).write_text(json.dumps(figures, indent=2) + "\n")
        return 0
    if arguments.served:
        print(f"walqueue-serve, 4 client processes, {arguments.ops} ops per phase, {arguments.reps} repetitions")
        figures = served(arguments.reps, arguments.ops, min_polls=arguments.min_polls)
        if arguments.json:
            Path(arguments.json).write_text(json.dumps(figures, indent=2) + "\n")
        return 0
    dead, leased = arguments.tasks // 10, arguments.tasks // 20
    with tempfile.TemporaryDirectory(dir=arguments.dir) as place:
        start = time.perf_counter()
        queue = build(Path(place) / "q", arguments.tasks, dead, leased)
        print(
            f"built {arguments.tasks:,} tasks ({dead:,} dead, {leased:,} leased) in {time.perf_counter() - start:.1f} s"
        )
        app = Dashboard(queue, clock=lambda: NOW)
        group = json.loads(_body(app, "/api/dead/groups"))["groups"][0]["group"]
        routes = {
            "overview": ("/api/overview", ""),
            "metrics": ("/metrics", ""),
            "leases first page": ("/api/leases", "limit=50"),
            "leases deep page": ("/api/leases", f"limit=50&after=l{leased - 100:07d}"),
            "dead first page": ("/api/dead", "limit=50"),
            "dead deep page": ("/api/dead", f"limit=50&after=d{dead - 100:07d}"),
            "dead page 200 (offset)": ("/api/dead", "limit=50&page=200"),
            "dead of one group": ("/api/dead", f"limit=50&group={group}"),
            "dead groups (reused)": ("/api/dead/groups", ""),
        }
        figures = {"tasks": arguments.tasks, "dead": dead, "leased": leased, "routes": {}}
        worst_bytes = 0
        for name, (path, query) in routes.items():
            seconds, (status, size) = timed(functools.partial(call, app, path, query), arguments.reps)
            assert status == 200, (name, status)
            worst_bytes = max(worst_bytes, size)
            figures["routes"][name] = {"seconds": seconds, "bytes": size}
            print(f"  {name:24} {seconds * 1000:9.1f} ms {size:9,} bytes")
        seconds, (status, size) = timed(
            lambda: call(Dashboard(queue, clock=lambda: NOW), "/api/dead/groups"), arguments.reps
        )
        figures["routes"]["dead groups, not reused"] = {"seconds": seconds, "bytes": size}
        print(f"  {'dead groups, not reused':24} {seconds * 1000:9.1f} ms {size:9,} bytes")
        whole_lists: tuple[tuple[Literal["dead", "leased"], str], ...] = (
            ("dead", "dead deep page"),
            ("leased", "leases deep page"),
        )
        for listed, page_route in whole_lists:
            whole, _ = timed(functools.partial(queue.tasks, listed), max(1, arguments.reps // 2))
            page = figures["routes"][page_route]["seconds"]
            figures[f"whole_{listed}_seconds"] = whole
            figures[f"{listed}_page_vs_whole"] = whole / page
            print(f"  peer: tasks({listed!r}) {whole * 1000:9.1f} ms; a page is {whole / page:5.1f}x faster")
        verdict = "met" if worst_bytes <= MAX_ANSWER_BYTES else "NOT MET"
        print(f"largest answer {worst_bytes:,} bytes (target <= {MAX_ANSWER_BYTES:,}): {verdict}")
        figures["largest_answer_bytes"] = worst_bytes
        figures["python"] = sys.version.split()[0]
        queue.close()
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _body(app: Dashboard, path: str) -> bytes:
    environ = {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
    }
    return b"".join(app(environ, lambda *_: None))


if __name__ == "__main__":
    raise SystemExit(main())
