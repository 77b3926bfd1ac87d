#!/usr/bin/env python3
"""The dashboard on a queue of a million tasks: every page in bounded time and size.

    python tools/bench_dashboard.py                   1,000,000 tasks (100,000 dead, 50,000 leased)
    python tools/bench_dashboard.py --tasks 100000    a smaller queue (the dead and leased scale with it)
    python tools/bench_dashboard.py --json out.json   also write every figure as JSON

Each route of the dashboard is called through its WSGI interface (no
sockets: the figures are the app's and the queue's), `--reps` times, and
the median seconds and the answer's bytes are reported. The peer, measured
in the same run on the same queue: the unbounded read a dashboard without
paging would make, `Queue.tasks(status)` for the same status. A page's
figures do not depend on its depth (a cursor, never an offset), and its
size is bounded by its limit; the ratio to the whole read is the saving.
Nothing here is a test: the targets are printed as met / NOT MET.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
for _dist in ("walqueue-cli", "walqueue-engine", "walqueue-format"):
    sys.path.insert(0, str(_ROOT / "packages" / _dist / "src"))

from walqueue import Queue  # noqa: E402
from walqueue.dashboard import Dashboard  # noqa: E402

NOW = 1_000
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
    body = b"".join(app(environ, lambda line, headers, *_: status.append(int(line.split()[0]))))  # type: ignore[arg-type]
    return status[0], len(body)


def timed(function: Callable[[], Any], reps: int) -> tuple[float, Any]:
    samples = []
    result = None
    for _ in range(reps):
        start = time.perf_counter()
        result = function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--dir", default=None, help="where the store goes (default: the system temp dir)")
    arguments = parser.parse_args(argv)
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
            "dead groups": ("/api/dead/groups", ""),
        }
        figures: dict[str, Any] = {"tasks": arguments.tasks, "dead": dead, "leased": leased, "routes": {}}
        worst_bytes = 0
        for name, (path, query) in routes.items():
            seconds, (status, size) = timed(lambda p=path, q=query: call(app, p, q), arguments.reps)
            assert status == 200, (name, status)
            worst_bytes = max(worst_bytes, size)
            figures["routes"][name] = {"seconds": seconds, "bytes": size}
            print(f"  {name:24} {seconds * 1000:9.1f} ms {size:9,} bytes")
        for status, page_route in (("dead", "dead deep page"), ("leased", "leases deep page")):
            whole, _ = timed(lambda s=status: queue.tasks(s), max(1, arguments.reps // 2))
            page = figures["routes"][page_route]["seconds"]
            figures[f"whole_{status}_seconds"] = whole
            figures[f"{status}_page_vs_whole"] = whole / page
            print(f"  peer: tasks({status!r}) {whole * 1000:9.1f} ms; a page is {whole / page:5.1f}x faster")
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
    return b"".join(app(environ, lambda *_: None))  # type: ignore[arg-type]


if __name__ == "__main__":
    raise SystemExit(main())
