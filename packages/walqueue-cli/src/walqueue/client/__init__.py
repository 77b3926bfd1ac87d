"""The clients of a served queue: `Client` (blocking, with `Pipeline`) and `AsyncClient` (asyncio).

Both have `Queue`'s methods and shape every call through `walqueue.protocol`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walqueue.client.asynchronous import AsyncClient
from walqueue.client.blocking import Client, Pipeline, ServerError

if TYPE_CHECKING:  # both clients are sources (mypy --strict checks these lines; `Queue`'s is in protocol/source.py)
    from walqueue.protocol.source import AsyncQueueSource, QueueSource

    _CLIENT_IS_A_SOURCE: type[QueueSource] = Client
    _ASYNC_CLIENT_IS_A_SOURCE: type[AsyncQueueSource] = AsyncClient

__all__ = ["AsyncClient", "Client", "Pipeline", "ServerError"]
