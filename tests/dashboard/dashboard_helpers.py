"""Helpers of the dashboard tests: `call` sends one WSGI request (validated by `wsgiref.validate`)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from wsgiref.util import setup_testing_defaults
from wsgiref.validate import validator

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
