"""A FastAPI (ASGI) app that enqueues through an `AsyncClient` and awaits the result.

Run it (with walqueue-serve and a worker running ``web_tasks:app``)::

    WALQUEUE_SOCKET=/tmp/q.sock uvicorn fastapi_app:web

``GET /add?a=1&b=2`` enqueues the async task `add`, awaits its result
(`aresult`: the server's long-poll `wait`, never a sleep loop) and answers
it; 504 if no worker ran it within the timeout.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from web_tasks import add
from web_tasks import app as tasks_app

from walqueue.client import AsyncClient
from walqueue.worker import TaskFailed


def create_app(socket_path: str | None = None, timeout: float = 10.0) -> FastAPI:
    @asynccontextmanager
    async def lifespan(web: FastAPI) -> AsyncIterator[None]:
        async with AsyncClient(socket_path or os.environ["WALQUEUE_SOCKET"]) as client:
            tasks_app.bind(client)
            yield

    web = FastAPI(lifespan=lifespan)

    @web.get("/add")
    async def add_numbers(a: int, b: int) -> dict[str, Any]:
        handle = await add.aenqueue(a, b)
        try:
            total = await handle.aresult(timeout=timeout)
        except TimeoutError:
            raise HTTPException(504, f"task {handle.id} has no result yet") from None
        except TaskFailed as failed:
            raise HTTPException(500, str(failed)) from None
        return {"task_id": handle.id, "sum": total}

    return web


web = create_app() if "WALQUEUE_SOCKET" in os.environ else None
