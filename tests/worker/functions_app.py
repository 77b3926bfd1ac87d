"""An App of task functions shared by the tests of tasks as functions (and run by walqueue-worker in them)."""

from __future__ import annotations

import asyncio
from typing import Any

from walqueue.worker import App, Permanent, current

app = App()
CALLS: list[str] = []


@app.task
def add(a: int, b: int = 0) -> int:
    return a + b


@app.task(name="greet")
def greet(name: str, *, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


@app.task(max_attempts=1)
def broken(reason: str) -> None:
    raise ValueError(reason)


@app.task(max_attempts=1)
def refused() -> None:
    raise Permanent("never")


@app.task
def nothing() -> None:
    CALLS.append("nothing")


@app.task(max_attempts=1)
def huge() -> str:
    return "x" * 70_000


@app.task
def step(n: int, last: int) -> int:
    """One step of a chain: the next one is a follow-up, committed with this one's completion."""
    if n < last:
        current().enqueue(step, n + 1, last)
    return n


BROKEN: set[int] = set()  # the steps of fragile_step that fail (a test mends them)


@app.task(max_attempts=1)
def fragile_step(n: int, last: int) -> int:
    if n in BROKEN:
        raise RuntimeError(f"step {n} broke")
    if n < last:
        current().enqueue(fragile_step, n + 1, last)
    return n


@app.task
async def slow_double(x: int, seconds: float = 0.0) -> int:
    await asyncio.sleep(seconds)
    return 2 * x


@app.task(timeout=2.0, max_attempts=1)
async def sleeps_too_long() -> Any:
    try:
        await asyncio.sleep(30)
    finally:
        CALLS.append("cancelled")


@app.task
async def async_parent(n: int) -> int:
    """current() in a coroutine: the context variable is the running task's there too."""
    await asyncio.sleep(0)
    current().enqueue(add, n, 1)
    return n
