"""The JSON-lines consumer (`python -m walqueue.cli DIRECTORY`), the server
(`walqueue-serve`) and its client (`Client`)."""

from walqueue.cli.client import Client

__all__ = ["Client"]
