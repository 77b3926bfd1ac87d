"""Comparing a `Queue` with a `Model`: an exact text of a result (`render`) and of the whole state (`view`)."""

from __future__ import annotations

from typing import Any

from walqueue import Lease, Queue, Task
from walqueue.format.canonical import canonical_json

from .reads import Model


def _plain(value: Any) -> Any:
    if isinstance(value, Task):
        return {"Task": value.to_dict()}
    if isinstance(value, Lease):
        return {"Lease": value.to_dict()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def render(value: Any) -> str:
    """An exact text of a call's result: `1`, `1.0` and `True` render differently."""
    return canonical_json(_plain(value)).decode("utf-8")


def view(queue_or_model: Queue | Model) -> dict[str, Any]:
    """The whole observable state: every task (rendered exactly), counts, last_seq.

    Two views are equal iff every read gives the same answer; storage details
    (`snapshot_seq`, `wal_bytes`, `segments`) are deliberately left out.
    """
    if isinstance(queue_or_model, Model):
        counts = queue_or_model.counts()
        due = {"next_available_at": queue_or_model.next_available_at(), "next_deadline": queue_or_model.next_deadline()}
        clock = queue_or_model.clock
    else:
        stats = queue_or_model.stats()
        counts = stats["counts"]
        due = {"next_available_at": stats["next_available_at"], "next_deadline": stats["next_deadline"]}
        clock = stats["clock"]
    return {
        "tasks": [render(task) for task in queue_or_model.tasks()],
        "counts": render(counts),
        "due": render(due),
        "last_seq": queue_or_model.last_seq,
        "clock": clock,
        "queues": render(queue_or_model.queues()),
    }
