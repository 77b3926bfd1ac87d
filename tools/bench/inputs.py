"""The tasks every workload puts: realistic payloads of about 110 bytes, numbered ids, and the reserving worker."""

from __future__ import annotations

import json
from typing import Any

WORKER = "worker-1"
NOW = 1_000
LEASE_SECONDS = 600
FILL_BATCH = 1_000


def payload(i: int) -> dict[str, Any]:
    """A realistic payload of about 110 bytes of canonical JSON."""
    return {
        "body": f"Your order #{i:08d} has shipped.",
        "kind": "email",
        "priority": i % 3,
        "to": f"customer{i:08d}@example.com",
    }


PAYLOAD_BYTES = len(json.dumps(payload(12_345_678), sort_keys=True, separators=(",", ":")).encode())


def task_id(prefix: str, i: int) -> str:
    return f"{prefix}-{i:09d}"


def puts(prefix: str, start: int, count: int) -> list[tuple[str, dict[str, Any]]]:
    return [(task_id(prefix, i), payload(i)) for i in range(start, start + count)]


def put_items(prefix: str, start: int, count: int) -> list[dict[str, Any]]:
    return [{"task_id": task_id(prefix, i), "payload": payload(i)} for i in range(start, start + count)]


def put_items_keys_reversed(prefix: str, start: int, count: int) -> list[dict[str, Any]]:
    """`put_items` with each payload's keys in reverse order (the same payloads, out of canonical order)."""
    return [
        {"task_id": task_id(prefix, i), "payload": dict(reversed(payload(i).items()))}
        for i in range(start, start + count)
    ]
