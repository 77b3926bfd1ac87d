"""The JSON-lines consumer: `python -m walqueue.cli DIRECTORY`."""
