"""The JSON-lines consumer (`python -m walqueue.cli DIRECTORY`), the server
(`walqueue-serve`) and its clients (`Client`, `AsyncClient`).

The clients are imported on first use, so that the consumer and the server
do not pay for asyncio at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walqueue.cli.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from walqueue.cli import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
