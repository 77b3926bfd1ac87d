"""Helpers of the dashboard tests: `call` sends one WSGI request (validated by `wsgiref.validate`); `serve` and
`served_dashboard` run a real walqueue-serve with its dashboard."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults
from wsgiref.validate import validator

from support.servers import serve_command
from walqueue import Queue
from walqueue.dashboard import Dashboard

#: The dashboard's clock in these tests: fixed, in seconds since the epoch.
NOW = 1_800_000_000


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    app: Dashboard,
    path: str,
    *,
    method: str = "GET",
    query: str = "",
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """One request through the WSGI interface (validated), as a browser or curl would send it."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)) if method == "POST" else "",
    }
    for name, value in (headers or {}).items():
        key = name.upper().replace("-", "_")
        environ[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value
    setup_testing_defaults(environ)
    seen: dict[str, Any] = {}

    def start_response(status: str, header_list: list[tuple[str, str]], exc_info: Any = None) -> Any:
        seen["status"] = int(status.split()[0])
        seen["headers"] = dict(header_list)
        return lambda data: None

    result = validator(app)(environ, start_response)
    try:
        data = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return Answer(seen["status"], seen["headers"], data)


def form_headers(token: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if token is not None:
        headers["X-WALQueue-Token"] = token
    return headers


def post_action(app: Dashboard, action: str, body: str) -> Answer:
    """`action` posted as the page posts it: the form-encoded `body`, with the dashboard's own token."""
    return call(
        app, f"/api/actions/{action}", method="POST", body=body.encode(), headers=form_headers(app.action_token)
    )


def kill(
    queue: Queue,
    task_id: str,
    payload: dict[str, Any] | None = None,
    error: str = "ValueError",
    message: str = "bad input",
) -> None:
    """Put a task with one attempt, lease it and release it with an error: it is dead, with that last error.

    Call it before other tasks are due (its reserve leases whatever is).
    """
    queue.put(task_id, payload or {"n": task_id}, max_attempts=1)
    for lease in queue.reserve("killer", now=NOW, lease_seconds=60, limit=100):
        queue.release(lease, now=NOW, error={"type": error, "message": message})


def serve(src_pythonpath: str, place: Path, *options: str) -> subprocess.Popen[str]:
    """walqueue-serve on ``place/q`` with its socket ``place/s``, its output piped as text.

    The child's environment is the src directories and a PATH, nothing of
    this process's: what it prints and refuses is its own.
    """
    return subprocess.Popen(
        serve_command(place / "q", place / "s", *options),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": src_pythonpath, "PATH": "/usr/bin:/bin"},
    )


def refused_start(src_pythonpath: str, place: Path, *options: str) -> tuple[int, str]:
    """The exit status and stderr of a walqueue-serve that `options` make stop at once."""
    process = serve(src_pythonpath, place, *options)
    _, err = process.communicate(timeout=60)
    return process.returncode, err


@contextlib.contextmanager
def served_dashboard(src_pythonpath: str, place: Path, *options: str, log_level: str = "WARNING") -> Iterator[str]:
    """walqueue-serve with --http on a free port (and `options`): its dashboard's URL; stopped after, with status 0."""
    process = serve(src_pythonpath, place, "--http", "127.0.0.1:0", *options, "--log-level", log_level)
    try:
        assert process.stdout is not None
        assert "listening on" in process.stdout.readline()
        line = process.stdout.readline()
        assert line.startswith("walqueue-serve: dashboard on http://"), line
        yield line.split("dashboard on ", 1)[1].strip()
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert process.returncode == 0
