"""The calls whose frames `test_put_frames_bytes` pins: puts and put_manys, with and without lanes fields.

Kept apart from the test so that the very same calls can be run against an
older tree to make the golden file (``python3.12 tests/engine/put_frames_calls.py OUT``
with that tree's packages on PYTHONPATH): the frames a sequence of calls writes are
the disk format, and a change to the put path must leave them byte for byte as they were.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from walqueue import Queue

_PAYLOADS: list[dict[str, Any]] = [
    {},
    {"n": 1},
    {"to": "ada@example.org", "body": 'héllo \u2603 "quoted" \\ back', "tags": ["a", "b"], "n": -3},
    {"nested": {"z": [1, 2.5, None, True, False], "a": {"deep": {"er": "x"}}}, "f": 1e-7, "big": 2**62},
    {"ctrl": "\x00\x1f\n\t", "emoji": "\U0001f600", "ok": None},
]


def run(queue: Queue) -> None:
    """Every shape of put the engine writes: defaults, explicit keys, times, attempts, lanes, retries."""
    for n, payload in enumerate(_PAYLOADS):
        queue.put(f"put-{n}", payload)
    queue.put("keyed", {"k": 1}, key="order:1", available_at=17, max_attempts=9)
    queue.put("same-key", {"k": 2}, key="same-key")
    queue.put("lane-a", {"k": 3}, queue="mail", priority=5)
    queue.put("lane-b", {"k": 4}, queue="default", priority=-2)
    queue.put("lane-c", {"k": 5}, queue="q.2:x-y_z", priority=0)
    queue.put("put-1", {"n": 1})  # an identical retry writes nothing
    queue.put_many(
        [
            {"task_id": f"many-{n}", "payload": payload, **extra}
            for n, (payload, extra) in enumerate(
                zip(
                    _PAYLOADS * 3,
                    [
                        {},
                        {"key": "m-key"},
                        {"available_at": 3},
                        {"max_attempts": 1},
                        {"queue": "mail"},
                        {"priority": 100},
                        {"queue": "bulk", "priority": -100},
                        {"key": "many-7", "queue": "default", "priority": 0},
                        {"available_at": 2**62, "max_attempts": 2**40},
                        {},
                        {"queue": "mail", "priority": 1},
                        {"key": "\u00e9t\u00e9"},
                        {},
                        {},
                        {"priority": -1},
                    ],
                    strict=True,
                )
            )
        ]
    )
    queue.put_many([{"task_id": "many-0", "payload": {}}, {"task_id": "tail", "payload": {"last": True}}])
    queue.put_many([{"task_id": "lone", "payload": {"x": "y"}, "queue": "mail"}])
    queue.put_many([{"task_id": "many-0", "payload": {}}])  # all retries: writes nothing


def _read(directory: Path, pattern: str) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.glob(pattern)))


def make(store: Path) -> bytes:
    """Run the calls into a new store: its WAL's frames, then the snapshot of the result.

    A cleanly closed segment holds exactly its frames. The snapshot holds
    each task's identity digest, so it pins those too.
    """
    with Queue(store, sync=False, compact_bytes=None) as queue:
        run(queue)
    frames = _read(store, "wal-*.log")
    with Queue(store, sync=False, compact_bytes=None) as queue:
        queue.compact()
    return frames + _read(store, "snapshot-*.snap")


if __name__ == "__main__":
    out, store = Path(sys.argv[1]), Path(sys.argv[2])
    out.write_bytes(make(store))
