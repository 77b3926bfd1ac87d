"""The clients of a served queue: `Client` (blocking, with `Pipeline`) and `AsyncClient` (asyncio).

Both have `Queue`'s methods and shape every call through `walqueue.protocol`.
"""

from __future__ import annotations

from walqueue.client.asynchronous import AsyncClient
from walqueue.client.blocking import Client, Pipeline, ServerError

__all__ = ["AsyncClient", "Client", "Pipeline", "ServerError"]
