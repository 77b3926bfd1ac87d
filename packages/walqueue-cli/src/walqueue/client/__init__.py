"""The clients of a served queue: `Client` (blocking, with `Pipeline`) and `AsyncClient` (asyncio).

Both have `Queue`'s methods and shape every call through `walqueue.protocol`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from walqueue.client.blocking import Client, Pipeline, ServerError

if TYPE_CHECKING:  # both clients are sources (mypy --strict checks these lines; `Queue`'s is in protocol/source.py)
    from walqueue.client.asynchronous import AsyncClient
    from walqueue.protocol.source import AsyncQueueSource, QueueSource

    _CLIENT_IS_A_SOURCE: type[QueueSource] = Client
    _ASYNC_CLIENT_IS_A_SOURCE: type[AsyncQueueSource] = AsyncClient

__all__ = ["AsyncClient", "Client", "Pipeline", "ServerError"]


def __getattr__(name: str) -> Any:
    """`AsyncClient` on first use: a blocking client (a worker process) does not import asyncio."""
    if name == "AsyncClient":
        from walqueue.client.asynchronous import AsyncClient

        return AsyncClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
