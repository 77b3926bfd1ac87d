"""The model's puts: `put` and `put_many`, an identity per task and idempotent retries (CONTRACT §2 put)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from walqueue import KeyConflict
from walqueue.format.canonical import canonical_json
from walqueue.protocol.shaping import PutOptions

from .rules import (
    MAX_FRAME_BYTES,
    PUT_FIELDS,
    TASK_MARGIN,
    check_int,
    check_name,
    check_payload,
    check_priority,
    check_queue,
    copy_json,
)
from .state import ModelState


class PutCalls(ModelState):
    """`put` and `put_many`: the task's identity, the key's check, one transaction for every new task."""

    def put(self, task_id: str, payload: dict[str, Any], **options: Unpack[PutOptions]) -> str:
        """Create a task, or return `task_id` for an identical retry (CONTRACT §2 put); options as `_request`'s."""
        return self._put_requests([self._request(task_id, payload, **options)])[0]

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        """All-or-nothing: one transaction for every new task (CONTRACT §2 put_many)."""
        if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
            raise TypeError("put_many takes an iterable of mappings")
        requests = []
        for item in list(tasks):
            if not isinstance(item, Mapping):
                raise TypeError(f"put_many items must be mappings, not {type(item).__name__}")
            unknown = set(item) - PUT_FIELDS
            if unknown:
                raise TypeError(f"unknown put_many item keys: {sorted(map(repr, unknown))}")
            for required in ("task_id", "payload"):
                if required not in item:
                    raise TypeError(f"put_many item without {required!r}")
            requests.append(self._request(**item))  # its keys: PUT_FIELDS, the two required ones among them
        return self._put_requests(requests)

    def _request(
        self,
        task_id: object,
        payload: object,
        key: object = None,
        available_at: object = 0,
        max_attempts: object = 3,
        queue: object = "default",
        priority: object = 0,
        put_at: object = 0,
    ) -> dict[str, Any]:
        """A put's checked request; the defaults of `put`'s options and of a `put_many` item, written once."""
        task_id = check_name(task_id, "task_id")
        key = task_id if key is None else check_name(key, "key")
        available_at = check_int(available_at, "available_at", 0)
        max_attempts = check_int(max_attempts, "max_attempts", 1)
        queue = check_queue(queue)
        priority = check_priority(priority)
        put_at = check_int(put_at, "put_at", 0)  # the producer's time: due from then, never in the identity
        payload = check_payload(payload)
        lane: dict[str, Any] = {"queue": queue} if queue != "default" else {}
        if priority:
            lane["priority"] = priority
        payload_bytes = canonical_json(payload)
        size = len(payload_bytes) + len(canonical_json(task_id)) + len(canonical_json(key)) + TASK_MARGIN
        if size > MAX_FRAME_BYTES:
            raise ValueError("task too large for one frame")
        identity = canonical_json(
            {"available_at": available_at, "max_attempts": max_attempts, "payload": payload, "task": task_id, **lane}
        )
        return {
            "task": task_id,
            "key": key,
            "identity": identity,
            "payload": copy_json(payload),
            "available_at": available_at,
            "max_attempts": max_attempts,
            "lane": lane,
            "put_at": put_at,
        }

    def _put_requests(self, requests: list[dict[str, Any]]) -> list[str]:
        new: dict[str, dict[str, Any]] = {}  # key -> request, in input order
        new_ids: set[str] = set()
        ids: list[str] = []
        for request in requests:
            key = request["key"]
            if key in self._keys:
                known = self._tasks[self._keys[key]]["identity"]
            elif key in new:
                known = new[key]["identity"]
            else:
                known = None
            if known is not None:
                if known != request["identity"]:
                    raise KeyConflict(f"key {key!r} is known with another identity")
            elif request["task"] in self._tasks or request["task"] in new_ids:
                raise KeyConflict(f"task {request['task']!r} exists under another key")
            else:
                new[key] = request
                new_ids.add(request["task"])
            ids.append(request["task"])
        if not new:
            return ids
        ops = [
            {
                "op": "put",
                "task": r["task"],
                "key": r["key"],
                "payload": r["payload"],
                "available_at": r["available_at"],
                "max_attempts": r["max_attempts"],
                **r["lane"],
                **({"put_at": r["put_at"]} if r["put_at"] else {}),
            }
            for r in new.values()
        ]
        body = self._next_body()
        for op in ops:
            if not body.add(op):
                raise ValueError("put_many transaction exceeds the frame bound")
        self._commit()
        for r in new.values():
            self._tasks[r["task"]] = {
                "task": r["task"],
                "key": r["key"],
                "identity": r["identity"],
                "status": "ready",
                "payload": r["payload"],
                "available_at": max(r["available_at"], r["put_at"]),
                "max_attempts": r["max_attempts"],
                "attempts": 0,
                "generation": 0,
                "worker": None,
                "deadline": None,
                "last_error": None,
                "queue": r["lane"].get("queue", "default"),
                "priority": r["lane"].get("priority", 0),
            }
            self._keys[r["key"]] = r["task"]
        return ids
