"""`AsyncRunner`: the one asyncio event loop of a worker process, on which its `async def` tasks run.

How sync and async tasks share a process: the worker's executor threads
(--concurrency of them) take every task. A plain function runs on the
executor thread; a coroutine function is handed to this loop (one thread,
started on first use) and its executor thread waits for it. So at most
--concurrency tasks run at once, sync and async together, and heartbeats,
retries, the last error and a clean SIGTERM are the worker's, exactly as
for threads; the coroutines of one process share the loop, so one that
blocks (calls a blocking function without awaiting) holds back the others.

A timeout is hard for a coroutine: when the task's own timeout passes, or
the worker takes the task back (its --timeout, a lost lease, the end of the
shutdown grace), the coroutine is cancelled: `asyncio.CancelledError` is
raised at the `await` it is suspended on, its ``finally`` blocks and
``async with`` exits run, and the loop goes on serving the others. A
handler that catches `CancelledError` and carries on defeats it (do not);
code between two awaits is never interrupted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

__all__ = ["AsyncRunner"]

#: How often a waiting executor thread looks whether the worker took its task back.
_LOOK_EVERY_SECONDS = 0.05


class AsyncRunner:
    """An event loop on a daemon thread; `run(coroutine, timeout, lost)` from any other thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="walqueue-worker event loop", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(
        self, coroutine: Coroutine[Any, Any, Any], timeout: float | None, lost: threading.Event | None = None
    ) -> Any:
        """Run `coroutine` on the loop and return its value; `TimeoutError` once `timeout` seconds pass.

        Should `lost` be set meanwhile (the worker took the task back), the
        coroutine is cancelled, and once it has finished (its ``finally``
        blocks run) `asyncio.CancelledError` is raised here.
        """
        finished = threading.Event()
        started: list[asyncio.Task[Any]] = []

        def start() -> None:
            task = self.loop.create_task(_bounded(coroutine, timeout))
            task.add_done_callback(lambda _: finished.set())
            started.append(task)

        self.loop.call_soon_threadsafe(start)  # callbacks run in order: `start` before any cancel below
        while not finished.wait(_LOOK_EVERY_SECONDS):
            if lost is not None and lost.is_set():
                self.loop.call_soon_threadsafe(lambda: started[0].cancel())
                finished.wait()
        task = started[0]
        if task.cancelled():
            raise asyncio.CancelledError("the worker took the task back; the coroutine was cancelled")
        error = task.exception()
        if error is not None:
            raise error
        return task.result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5.0)


async def _bounded(coroutine: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
    if timeout is None:
        return await coroutine
    try:
        async with asyncio.timeout(timeout):
            return await coroutine
    except TimeoutError:
        raise TimeoutError(f"the coroutine ran longer than its timeout ({timeout} s) and was cancelled") from None
