"""A Flask (WSGI) app that puts tasks through walqueue-serve with a `Client`.

Run it (with walqueue-serve and a worker running ``web_tasks:app``)::

    walqueue-serve /tmp/q --socket /tmp/q.sock &
    walqueue-worker --socket /tmp/q.sock web_tasks:app &
    WALQUEUE_SOCKET=/tmp/q.sock flask --app flask_app run

``POST /signup`` with ``email=...`` enqueues the welcome email and answers
its task id at once; ``GET /tasks/<id>`` answers its status and, once it
completed, its result (no waiting in a request: the page polls).
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, abort, jsonify, request
from web_tasks import app as tasks_app
from web_tasks import send_welcome

from walqueue.client import Client
from walqueue.worker import TaskFailed


def create_app(socket_path: str | None = None) -> Flask:
    web = Flask(__name__)
    client = Client(socket_path or os.environ["WALQUEUE_SOCKET"])  # one client; each thread gets a connection
    tasks_app.bind(client)

    @web.post("/signup")
    def signup() -> Any:
        email = request.form.get("email", "")
        if "@" not in email:
            abort(400, "email=... please")
        handle = send_welcome.options(key=f"welcome:{email}").enqueue(email)  # a second signup is the same task
        return jsonify(task_id=handle.id), 202

    @web.get("/tasks/<path:task_id>")
    def task(task_id: str) -> Any:
        handle = tasks_app.handle(task_id)
        status = handle.status()
        if status is None:
            abort(404)
        answer: dict[str, Any] = {"task_id": task_id, "status": status}
        if status in ("completed", "dead"):
            try:
                answer["result"] = handle.result(timeout=0)
            except TaskFailed as failed:
                answer["error"] = str(failed)
        return jsonify(answer)

    return web
