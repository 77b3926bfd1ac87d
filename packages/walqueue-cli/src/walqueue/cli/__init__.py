"""The JSON-lines consumer (`python -m walqueue.cli DIRECTORY`), the server
(`walqueue-serve`) and its clients (`Client`, `AsyncClient`)."""

from walqueue.cli.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client"]
