"""A deliberately simple reference model of the queue's semantics (CONTRACT §2).

`Model` answers every call the way `walqueue.Queue` must, with plain dicts and
linear scans, no disk and no cleverness, so that it can be read against the
contract (docs/CONTRACT.md) sentence by sentence. Tests run the same program against a `Queue` and a
`Model` and compare results, errors and states.

The model counts transactions exactly as the contract does, so `last_seq` is
comparable too:

- a `put`/`put_many` that creates tasks is one transaction; identical retries
  (and an empty `put_many`) are none;
- `reserve` is an optional reap transaction (split only where one frame would
  exceed the 16 MiB bound) followed by an optional lease transaction;
- a successful `ack`/`release`/`extend`/`redrive`/`cancel` is one
  transaction; every failure is none.

Public API (stable; crash campaigns and the torture harness import it):

- `Model()` with `put`, `put_many`, `reserve`, `ack`, `release`, `fail`, `give_back`, `extend`,
  `redrive`, `cancel` (the lease lifecycle calls), `get`, `tasks`, `counts()`,
  `next_available_at()`, `next_deadline()` (the two lifecycle keys of
  `stats()`), `last_seq` (property), `clone()` and `reap(now)` (the
  reap half of `reserve`, for the state between its two transactions); `compact()` and
  restarts do not change the model. `copy.deepcopy(model)` works as well.
- `view(queue_or_model)`: a comparable, exact view of the whole state
  (the two "when is work due" keys of `stats()` included).
- `render(value)`: an exact, comparable text of a call's result (`Task`,
  `Lease`, lists of them, ids, `None`), where `1`, `1.0` and `True` differ.
- `directory_digest(directory)` and `read_frames(path)`: small helpers for
  tests that look at the bytes a queue wrote.

Decisions the contract leaves to the implementation, taken here as the team
documented them: ints are `int` but never `bool`, with 0 <= x < 2**63
(outside: `ValueError`, wrong type: `TypeError`); names are non-empty `str`
of at most 1,024 UTF-8 bytes; payload nesting depth is at most 64 (the
payload object itself is level 1) and payload ints at most 14,000 bits; subclasses of
str/int/float/dict/list are refused with `TypeError`; a task is refused with `ValueError`
unless len(canonical payload) + len(canonical task id) + len(canonical key) +
8192 <= 16 MiB; a `Lease` whose `task_id`/`worker`/`generation` are ill-typed
is simply stale. Where a call has several problems the model reports argument
errors first, then conflicts/staleness.

The lease lifecycle calls, as the engine implements them: `extend` checks the token's type,
`now`, then `lease_seconds` (>= 1), then ownership exactly as `ack` does; the
new deadline is ``min(now + lease_seconds, 2**63 - 1)``. `redrive` checks
`available_at`, `extra_attempts` (>= 1), then `task_id` (a name), then the
task's status (`WrongStatus` unless dead), then that the grown
`max_attempts` stays below 2**63 (`ValueError`). `cancel` checks `task_id`,
then the status (`WrongStatus` unless ready or leased). A dead task may
therefore have attempts left (a cancelled one); a redriven one keeps its
attempts, generation, identity (its original put) and key.

The last error, as the engine implements it: `release`, `fail` (a
permanent failure: dead at once, fenced like `ack`) and `cancel` take
``error={"type": str, "message": str}``, checked before anything else
(not a mapping: `TypeError`; other keys: `ValueError`; a non-str value:
`TypeError`; an empty type: `ValueError`); a cancel with an error needs
`now` (`TypeError`). The type is cut to 256 and the message to 2,048 UTF-8
bytes, each ending in ``... [cut: N bytes]`` (N: the original size), after
lone surrogates are written as their ``\\udXXX`` escapes; if the error
would not fit beside a payload close to the frame bound, to 32 and 200
bytes. The task's `last_error` is then the type, the message, its attempts
at that moment and `now`, in the same transaction. An expiry records
``LeaseExpired`` with the attempt and the old deadline as its time. Every
transition but ack (which drops it) keeps the last error otherwise.

`give_back` (an unstarted lease returned) is fenced and checked as `ack`;
the lease is undone: the task is ready with its `available_at` and last
error as they were, `attempts` and `generation` one less.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import re
import shutil
import struct
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from walqueue import KeyConflict, Lease, Queue, StaleLease, Task, WrongStatus
from walqueue.format.canonical import canonical_json

__all__ = [
    "MAX_FRAME_BYTES",
    "STATUSES",
    "Model",
    "directory_digest",
    "nothing_written",
    "read_frames",
    "render",
    "view",
    "wal_bodies",
]

#: The frame bound of CONTRACT §3 (bytes of one frame body).
MAX_FRAME_BYTES = 16 * 2**20
#: The statuses, in the order `stats()["counts"]` lists them.
STATUSES: tuple[str, ...] = ("ready", "leased", "completed", "dead")

_INT_LIMIT = 2**63  # exclusive upper bound of every time and counter
_MAX_NAME_BYTES = 1024
_MAX_DEPTH = 64
_MAX_INT_BITS = 14_000  # payload ints: readable again under CPython's default int/str digit limit
_TASK_MARGIN = 8192
_RECORD_WITHOUT_ERROR = 6461  # the worst case of a record's other fields (validate.RECORD_WORST_CASE_EXTRA's table)
_ERROR_BOUNDS = (256, 2048)  # UTF-8 bytes of an error's type and message
_TIGHT_ERROR_BOUNDS = (32, 200)  # the same, beside a payload that leaves no room for them
_PUT_FIELDS = frozenset({"task_id", "payload", "key", "available_at", "max_attempts", "queue", "priority", "put_at"})
# Lanes (docs/DECISIONS.md §32): queue names, priorities, a queue's settings.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_UNCHANGED: Any = object()  # configure_queue's "leave it as it is"


def _check_queue(value: object, what: str = "queue") -> str:
    if type(value) is not str:
        raise TypeError(f"{what} must be a str")
    if not _QUEUE_NAME.fullmatch(value):
        raise ValueError(f"bad {what} {value!r}")
    return value


def _check_priority(value: object) -> int:
    if type(value) is not int:
        raise TypeError("priority must be an int")
    if not -100 <= value <= 100:
        raise ValueError("priority must be from -100 to 100")
    return value


# ---------------------------------------------------------------------------
# Argument checks (the same errors the Queue raises)


def _check_int(value: object, what: str, minimum: int) -> int:
    if type(value) is not int:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < minimum or value >= _INT_LIMIT:
        raise ValueError(f"{what} must be in [{minimum}, 2**63), got {value}")
    return value


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value.encode("utf-8")) > _MAX_NAME_BYTES:  # lone surrogates: UnicodeEncodeError
        raise ValueError(f"{what} is longer than {_MAX_NAME_BYTES} UTF-8 bytes")
    return value


def _check_json_value(value: object, depth: int) -> None:
    """Exact JSON types only (no subclasses but bool), finite floats, str keys, bounded depth."""
    kind = type(value)
    if value is None or kind is bool:
        return
    if isinstance(value, int) and kind is int:
        if value.bit_length() > _MAX_INT_BITS:
            raise ValueError(f"payload ints hold at most {_MAX_INT_BITS} bits")
        return
    if isinstance(value, str) and kind is str:
        value.encode("utf-8")  # lone surrogates: UnicodeEncodeError, a ValueError
        return
    if isinstance(value, float) and kind is float:
        if not math.isfinite(value):
            raise ValueError("payload numbers must be finite")
        return
    if isinstance(value, (dict, list)) and kind in (dict, list):
        if depth + 1 > _MAX_DEPTH:
            raise ValueError(f"payload nested deeper than {_MAX_DEPTH}")
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str) or type(k) is not str:
                    raise TypeError("payload keys must be str")
                k.encode("utf-8")
                _check_json_value(v, depth + 1)
        else:
            for v in value:
                _check_json_value(v, depth + 1)
        return
    raise TypeError(f"payload cannot hold a {kind.__name__}")


def _check_payload(payload: object) -> dict[str, Any]:
    if not isinstance(payload, dict) or type(payload) is not dict:
        raise TypeError(f"payload must be a dict, not {type(payload).__name__}")
    _check_json_value(payload, 0)
    return payload


def _copy(payload: Any) -> Any:
    return copy.deepcopy(payload)


def _check_error(error: object) -> tuple[str, ...] | None:
    if error is None:
        return None
    if not isinstance(error, Mapping):
        raise TypeError("error must be None or a mapping")
    if set(error) != {"type", "message"} and set(error) != {"type", "message", "traceback"}:
        raise ValueError("error has exactly the keys type and message (and traceback)")
    if type(error["type"]) is not str or type(error["message"]) is not str:
        raise TypeError("error type and message are str")
    if error["type"] == "":
        raise ValueError("error type is empty")
    if "traceback" not in error:
        return _escaped(error["type"]), _escaped(error["message"])
    if type(error["traceback"]) is not str:
        raise TypeError("error traceback is a str")
    return _escaped(error["type"]), _escaped(error["message"]), _escaped(error["traceback"])


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _cut(text: str, limit: int, *, tail: bool = False) -> str:
    """`text` in at most `limit` UTF-8 bytes: its head before a marker, or (`tail`) its tail after one.

    The tail is a traceback's (format extension "traceback"): its last lines say the most.
    """
    size = len(text.encode("utf-8"))
    if size <= limit:
        return text
    marker = f"[cut: {size} bytes] ..." if tail else f"... [cut: {size} bytes]"
    kept = ""
    for char in reversed(text) if tail else text:
        longer = char + kept if tail else kept + char
        if len(longer.encode("utf-8")) + len(marker) > limit:
            break
        kept = longer
    return marker + kept if tail else kept + marker


# ---------------------------------------------------------------------------
# The model


class Model:
    """The reference semantics of `walqueue.Queue` (CONTRACT §2), in memory.

    State: `_tasks` maps a task id to a record (a plain dict with the fields of
    a snapshot record, `identity` as the canonical bytes of the put), `_keys`
    maps an idempotency key to its task id, `_last_seq` counts transactions.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, str] = {}
        self._last_seq = 0
        #: The store's clock unit once `set_clock` recorded it (format extension "clock").
        self.clock: int | None = None
        self._results: dict[str, tuple[int, Any]] = {}  # complete's results: task id -> (expires, value)
        #: queue name -> {"concurrency", "rate" ([n, window] or None), "paused", "recent" (the last n lease times)}
        self._queues: dict[str, dict[str, Any]] = {}

    # -- bookkeeping ------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """The sequence of the last transaction (0 when none)."""
        return self._last_seq

    def clone(self) -> Model:
        """An independent copy (the same as `copy.deepcopy(model)`)."""
        return copy.deepcopy(self)

    def compact(self) -> None:
        """Compaction never changes what the queue answers."""

    def _next_body(self) -> _BodySize:
        return _BodySize(self._last_seq + 1)

    def _commit(self) -> None:
        self._last_seq += 1

    # -- writes -----------------------------------------------------------

    def put(
        self,
        task_id: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        available_at: int = 0,
        max_attempts: int = 3,
        queue: str = "default",
        priority: int = 0,
        put_at: int = 0,
    ) -> str:
        """Create a task, or return `task_id` for an identical retry (CONTRACT §2 put)."""
        request = self._request(task_id, payload, key, available_at, max_attempts, queue, priority, put_at)
        return self._put_requests([request])[0]

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        """All-or-nothing: one transaction for every new task (CONTRACT §2 put_many)."""
        if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
            raise TypeError("put_many takes an iterable of mappings")
        requests = []
        for item in list(tasks):
            if not isinstance(item, Mapping):
                raise TypeError(f"put_many items must be mappings, not {type(item).__name__}")
            unknown = set(item) - _PUT_FIELDS
            if unknown:
                raise TypeError(f"unknown put_many item keys: {sorted(map(repr, unknown))}")
            for required in ("task_id", "payload"):
                if required not in item:
                    raise TypeError(f"put_many item without {required!r}")
            requests.append(
                self._request(
                    item["task_id"],
                    item["payload"],
                    item.get("key"),
                    item.get("available_at", 0),
                    item.get("max_attempts", 3),
                    item.get("queue", "default"),
                    item.get("priority", 0),
                    item.get("put_at", 0),
                )
            )
        return self._put_requests(requests)

    def _request(
        self,
        task_id: object,
        payload: object,
        key: object,
        available_at: object,
        max_attempts: object,
        queue: object = "default",
        priority: object = 0,
        put_at: object = 0,
    ) -> dict[str, Any]:
        task_id = _check_name(task_id, "task_id")
        key = task_id if key is None else _check_name(key, "key")
        available_at = _check_int(available_at, "available_at", 0)
        max_attempts = _check_int(max_attempts, "max_attempts", 1)
        queue = _check_queue(queue)
        priority = _check_priority(priority)
        put_at = _check_int(put_at, "put_at", 0)  # the producer's time: due from then, never in the identity
        payload = _check_payload(payload)
        lane: dict[str, Any] = {"queue": queue} if queue != "default" else {}
        if priority:
            lane["priority"] = priority
        payload_bytes = canonical_json(payload)
        size = len(payload_bytes) + len(canonical_json(task_id)) + len(canonical_json(key)) + _TASK_MARGIN
        if size > MAX_FRAME_BYTES:
            raise ValueError("task too large for one frame")
        identity = canonical_json(
            {"available_at": available_at, "max_attempts": max_attempts, "payload": payload, "task": task_id, **lane}
        )
        return {
            "task": task_id,
            "key": key,
            "identity": identity,
            "payload": _copy(payload),
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

    def reserve(
        self, worker: str, *, now: int, lease_seconds: int, limit: int = 1, queues: list[str] | None = None
    ) -> list[Lease]:
        """Reap expired leases (own transaction), then lease ready tasks (CONTRACT §2 reserve)."""
        _check_name(worker, "worker")
        _check_int(now, "now", 0)
        _check_int(lease_seconds, "lease_seconds", 1)
        _check_int(limit, "limit", 1)
        if queues is not None:
            if type(queues) not in (list, tuple):
                raise TypeError("queues must be a list or None")
            names = [_check_queue(name, "queues item") for name in queues]
            if not names or len(set(names)) != len(names):
                raise ValueError("queues must name at least one queue, each once")
        # Capped at the end of time, so that reserve(now=2**63-1) can reap every lease.
        deadline = min(now + lease_seconds, _INT_LIMIT - 1)

        self.reap(now)

        # The lease: ready and available in the named queues, by (-priority, available_at, task_id),
        # each queue within its budget (paused: none; concurrency; rate).
        ready = sorted(
            (
                r
                for r in self._tasks.values()
                if r["status"] == "ready" and r["available_at"] <= now and (queues is None or r["queue"] in queues)
            ),
            key=lambda r: (-r["priority"], r["available_at"], r["task"]),
        )
        budgets = {name: self._budget(name, now) for name in {r["queue"] for r in ready}}
        chosen: list[dict[str, Any]] = []
        body = self._next_body()
        for record in ready:
            if len(chosen) == limit:
                break
            if budgets[record["queue"]] <= 0:
                continue
            op = {
                "op": "lease",
                "task": record["task"],
                "worker": worker,
                "generation": record["generation"] + 1,
                "deadline": deadline,
            }
            if self._settings(record["queue"])["rate"] is not None:
                op["at"] = now
            if not body.add(op):
                break  # "leases as many as fit instead"
            budgets[record["queue"]] -= 1
            chosen.append(record)
        if not chosen:
            return []
        self._commit()
        leases = []
        for record in chosen:
            settings = self._settings(record["queue"])
            if settings["rate"] is not None:
                settings["recent"] = (settings["recent"] + [now])[-settings["rate"][0] :]
            record["status"] = "leased"
            record["worker"] = worker
            record["deadline"] = deadline
            record["attempts"] += 1
            record["generation"] += 1
            leases.append(_lease(record))
        return leases

    # -- lanes: a queue's settings and the budget they leave a reserve ------------------------------

    def _settings(self, name: str) -> dict[str, Any]:
        return self._queues.get(name) or {"concurrency": None, "rate": None, "paused": False, "recent": []}

    def _leased(self, name: str) -> int:
        return sum(1 for r in self._tasks.values() if r["queue"] == name and r["status"] == "leased")

    def _budget(self, name: str, now: int) -> int:
        """How many leases queue `name` may grant at `now`: the sliding-log rule of the last n leases."""
        settings = self._settings(name)
        if settings["paused"]:
            return 0
        room = 2**63 if settings["concurrency"] is None else settings["concurrency"] - self._leased(name)
        if settings["rate"] is not None:
            n, window = settings["rate"]
            recent = settings["recent"]
            free = n - len(recent)
            for at in recent:
                if at + window > now:
                    break
                free += 1
            room = min(room, free)
        return room

    def configure_queue(
        self, name: str, *, concurrency: Any = _UNCHANGED, rate: Any = _UNCHANGED, paused: Any = _UNCHANGED
    ) -> None:
        """Set a queue's settings: omitted unchanged, None clears; one transaction if anything changes."""
        _check_queue(name, "name")
        if concurrency is not _UNCHANGED and concurrency is not None:
            _check_int(concurrency, "concurrency", 1)
        if rate is not _UNCHANGED and rate is not None:
            if type(rate) not in (list, tuple) or len(rate) != 2:
                raise TypeError("rate must be a pair (n, window) or None")
            _check_int(rate[0], "rate n", 1)
            _check_int(rate[1], "rate window", 1)
            if rate[0] > 10_000:
                raise ValueError("rate n must be at most 10000")
        if paused is not _UNCHANGED and type(paused) is not bool:
            raise TypeError("paused must be a bool")
        old = self._settings(name)
        new = {
            "concurrency": old["concurrency"] if concurrency is _UNCHANGED else concurrency,
            "rate": old["rate"] if rate is _UNCHANGED else (None if rate is None else [rate[0], rate[1]]),
            "paused": old["paused"] if paused is _UNCHANGED else paused,
        }
        if new == {key: old[key] for key in new}:
            return
        new["recent"] = [] if new["rate"] is None else old["recent"][-new["rate"][0] :]
        self._commit()
        self._queues[name] = new

    def queues(self) -> list[dict[str, Any]]:
        """Every queue with a task or a setting, by name."""
        names = {r["queue"] for r in self._tasks.values()} | {
            name for name, s in self._queues.items() if s["concurrency"] or s["rate"] or s["paused"]
        }
        answer = []
        for name in sorted(names):
            settings = self._settings(name)
            counts = dict.fromkeys(STATUSES, 0)
            for record in self._tasks.values():
                if record["queue"] == name:
                    counts[record["status"]] += 1
            times = [r["available_at"] for r in self._tasks.values() if r["queue"] == name and r["status"] == "ready"]
            answer.append(
                {
                    "name": name,
                    "concurrency": settings["concurrency"],
                    "rate": settings["rate"],
                    "paused": settings["paused"],
                    "counts": counts,
                    "oldest_ready_at": min((t for t in times if t), default=None),  # undated (0) apart
                    "undated_ready": times.count(0),
                }
            )
        return answer

    def reap(self, now: int) -> int:
        """Only the reap half of `reserve(now=...)`; return how many transactions it wrote.

        Every leased task whose deadline <= `now` expires, in task-id order, in
        as few consecutive transactions as the frame bound allows (0 when
        nothing is due). Crash tests use it for the state between a
        reserve's reap and its lease.
        """
        _check_int(now, "now", 0)
        written = 0
        expired = [r for _, r in sorted(self._tasks.items()) if r["status"] == "leased" and r["deadline"] <= now]
        batch: list[dict[str, Any]] = []
        body = self._next_body()
        for record in expired:
            op = {"op": "expire", "task": record["task"], "generation": record["generation"]}
            if not body.add(op):
                self._expire(batch)
                written += 1
                batch, body = [], self._next_body()
                body.add(op)
            batch.append(op)
        if batch:
            self._expire(batch)
            written += 1
        return written

    def _expire(self, ops: list[dict[str, Any]]) -> None:
        self._commit()
        for op in ops:
            record = self._tasks[op["task"]]
            old_deadline = record["deadline"]
            record["status"] = "dead" if record["attempts"] >= record["max_attempts"] else "ready"
            record["available_at"] = old_deadline
            record["last_error"] = {
                "type": "LeaseExpired",
                "message": f"worker {_cut(record['worker'], 128)} did not ack, release or extend"
                f" lease {record['generation']} by its deadline {old_deadline}",
                "attempt": record["attempts"],
                "at": old_deadline,
            }
            record["worker"] = None
            record["deadline"] = None

    @staticmethod
    def _check_token(lease: object, now: object) -> None:
        if not isinstance(lease, Lease):
            raise TypeError(f"expected a Lease, not {type(lease).__name__}")
        _check_int(now, "now", 0)

    def _owner_record(self, lease: Lease, now: int) -> dict[str, Any]:
        task_id, worker, generation = lease.task_id, lease.worker, lease.generation
        if type(task_id) is not str or type(worker) is not str or type(generation) is not int:
            raise StaleLease("the lease token is ill-typed")
        record = self._tasks.get(task_id)
        if (
            record is None
            or record["status"] != "leased"
            or record["worker"] != worker
            or record["generation"] != generation
            or now >= record["deadline"]
        ):
            raise StaleLease(f"the lease on {task_id!r} is not held")
        return record

    def ack(self, lease: Lease, *, now: int) -> None:
        """Complete the leased task; its payload is dropped (CONTRACT §2 ack)."""
        self._check_token(lease, now)
        record = self._owner_record(lease, now)
        self._commit()
        self._complete(record)

    def ack_many(self, leases: Iterable[Lease], *, now: int) -> None:
        """Complete every leased task in one transaction, or none: a stale or repeated lease refuses them all."""
        if isinstance(leases, (str, bytes, Mapping, Lease)) or not isinstance(leases, Iterable):
            raise TypeError(f"expected an iterable of Lease, not {type(leases).__name__}")
        tokens = list(leases)
        if not all(isinstance(lease, Lease) for lease in tokens):
            raise TypeError("expected Lease items")
        _check_int(now, "now", 0)
        records: dict[str, dict[str, Any]] = {}
        for lease in tokens:
            record = self._owner_record(lease, now)
            if lease.task_id in records:
                raise StaleLease(f"{lease.task_id!r} is listed twice")
            records[lease.task_id] = record
        if records:
            self._commit()
        for record in records.values():
            self._complete(record)

    @staticmethod
    def _complete(record: dict[str, Any]) -> None:
        record["status"] = "completed"
        record["payload"] = None
        record["last_error"] = None
        record["worker"] = None
        record["deadline"] = None

    def _record_error(self, record: dict[str, Any], error: tuple[str, ...] | None, now: int) -> None:
        if error is None:
            return
        last_error = {"type": _cut(error[0], 256), "message": _cut(error[1], 2048), "attempt": record["attempts"]}
        last_error["at"] = now
        names = len(canonical_json(record["task"])) + len(canonical_json(record["key"]))
        member = len(b',"last_error":') + len(canonical_json(last_error))
        if len(canonical_json(record["payload"])) + names + _RECORD_WITHOUT_ERROR + member > MAX_FRAME_BYTES:
            last_error["type"], last_error["message"] = (_cut(error[0], 32), _cut(error[1], 200))
        if len(error) > 2:  # a traceback, kept when it fits beside the payload (never refused)
            with_traceback = {**last_error, "traceback": _cut(error[2], 8192, tail=True)}
            member = len(b',"last_error":') + len(canonical_json(with_traceback))
            if len(canonical_json(record["payload"])) + names + _RECORD_WITHOUT_ERROR + member <= MAX_FRAME_BYTES:
                last_error = with_traceback
        record["last_error"] = last_error

    def release(self, lease: Lease, *, now: int, delay: int = 0, error: Mapping[str, str] | None = None) -> None:
        """Give the task back, or bury it when its attempts are spent (CONTRACT §2 release)."""
        checked = _check_error(error)
        self._check_token(lease, now)
        _check_int(delay, "delay", 0)
        if now + delay >= _INT_LIMIT:
            raise ValueError("now + delay must be below 2**63")
        record = self._owner_record(lease, now)
        self._commit()
        self._record_error(record, checked, now)
        record["status"] = "dead" if record["attempts"] >= record["max_attempts"] else "ready"
        record["available_at"] = now + delay
        record["worker"] = None
        record["deadline"] = None

    def fail(self, lease: Lease, *, now: int, error: Mapping[str, str] | None = None) -> None:
        """A permanent failure: the held task is dead at once, whatever its attempts."""
        checked = _check_error(error)
        self._check_token(lease, now)
        record = self._owner_record(lease, now)
        self._commit()
        self._record_error(record, checked, now)
        record["status"] = "dead"
        record["worker"] = None
        record["deadline"] = None

    def give_back(self, lease: Lease, *, now: int) -> None:
        """Return a held lease never started: ready as before the lease, its attempt restored, fenced as ack."""
        self._check_token(lease, now)
        record = self._owner_record(lease, now)
        self._commit()
        record["status"] = "ready"
        record["attempts"] -= 1
        record["generation"] -= 1
        record["worker"] = None
        record["deadline"] = None

    def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease:
        """Move a held lease's deadline to now + lease_seconds, capped (extend); a new token."""
        self._check_token(lease, now)
        _check_int(lease_seconds, "lease_seconds", 1)
        record = self._owner_record(lease, now)
        self._commit()
        record["deadline"] = min(now + lease_seconds, _INT_LIMIT - 1)
        return _lease(record)

    def _record_in(self, task_id: object, statuses: tuple[str, ...], call: str) -> dict[str, Any]:
        task_id = _check_name(task_id, "task_id")
        record = self._tasks.get(task_id)
        if record is None:
            raise WrongStatus(f"{call}: no task {task_id!r}")
        if record["status"] not in statuses:
            raise WrongStatus(f"{call}: task {task_id!r} is {record['status']}")
        return record

    def redrive(self, task_id: str, *, available_at: int, extra_attempts: int = 1) -> None:
        """A dead task is ready again at `available_at` with `extra_attempts` more attempts (redrive)."""
        _check_int(available_at, "available_at", 0)
        _check_int(extra_attempts, "extra_attempts", 1)
        record = self._record_in(task_id, ("dead",), "redrive")
        if record["max_attempts"] + extra_attempts >= _INT_LIMIT:
            raise ValueError("max_attempts + extra_attempts must be below 2**63")
        self._commit()
        record["status"] = "ready"
        record["available_at"] = available_at
        record["max_attempts"] += extra_attempts

    def cancel(self, task_id: str, *, error: Mapping[str, str] | None = None, now: int | None = None) -> None:
        """A ready or leased task becomes dead, its worker and deadline cleared, its reason recorded (cancel)."""
        checked = _check_error(error)
        if now is not None:
            _check_int(now, "now", 0)
        elif checked is not None:
            raise TypeError("cancel with an error needs now")
        record = self._record_in(task_id, ("ready", "leased"), "cancel")
        self._commit()
        self._record_error(record, checked, 0 if now is None else now)
        record["status"] = "dead"
        record["worker"] = None
        record["deadline"] = None

    def set_clock(self, units_per_second: int) -> None:
        """Record the store's clock unit once; the same again writes nothing, another is a ValueError."""
        _check_int(units_per_second, "units_per_second", 1)
        if self.clock == units_per_second:
            return
        if self.clock is not None:
            raise ValueError(f"the store's clock unit is {self.clock} per second, not {units_per_second}")
        self._commit()
        self.clock = units_per_second

    # -- complete: ack + result + follow-up puts, one transaction ------------

    def complete(
        self,
        lease: Lease,
        *,
        now: int,
        result: Any = None,
        result_ttl: int = 86_400_000,
        puts: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """The ack, then the puts as `put_many`, as ONE transaction; any refusal writes nothing."""
        if not isinstance(lease, Lease):
            raise TypeError("expected a Lease")
        _check_int(now, "now", 0)
        ttl = _check_int(result_ttl, "result_ttl", 1)
        if now + ttl > 2**63 - 1:
            raise ValueError("now + result_ttl is too large")
        if result is not None and len(canonical_json(_check_payload({"v": result})["v"])) > 64 * 1024:
            raise ValueError("result too large")
        if isinstance(puts, (str, bytes, Mapping)) or not isinstance(puts, Iterable):
            raise TypeError("puts must be an iterable of mappings")
        items = list(puts)
        try:
            Model().put_many(items)  # the items' own checks come before the lease's
        except KeyConflict:
            pass  # a conflict among the items is judged after the lease, as the engine does
        self._check_token(lease, now)
        trial = self.clone()
        trial._complete(trial._owner_record(lease, now))
        trial.put_many(items)
        trial._last_seq = self._last_seq + 1
        self.__dict__ = trial.__dict__
        if result is not None:
            self._results[lease.task_id] = (now + ttl, _copy(result))
            self._results = {task: kept for task, kept in self._results.items() if kept[0] > now}

    def result(self, task_id: str, *, now: int | None = None) -> dict[str, Any] | None:
        kept = self._results.get(task_id)
        if kept is None or (now is not None and kept[0] <= now):
            return None
        return {"value": _copy(kept[1]), "expires": kept[0]}

    # -- reads ------------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        """The task, or `None` for any id never stored."""
        if not isinstance(task_id, str):
            raise TypeError(f"task_id must be a str, not {type(task_id).__name__}")
        record = self._tasks.get(task_id)
        return None if record is None else _task(record)

    def tasks(self, status: str | None = None, *, queue: str | None = None) -> list[Task]:
        """Every task (or those of one status, of one queue), ordered by task id."""
        if status is not None:
            if not isinstance(status, str):
                raise TypeError("status must be a str or None")
            if status not in STATUSES:
                raise ValueError(f"unknown status {status!r}")
        if queue is not None:
            _check_queue(queue)
        return [
            _task(r)
            for _, r in sorted(self._tasks.items())
            if (status is None or r["status"] == status) and (queue is None or r["queue"] == queue)
        ]

    def counts(self) -> dict[str, int]:
        """The number of tasks per status, always with exactly the four keys."""
        counts = dict.fromkeys(STATUSES, 0)
        for record in self._tasks.values():
            counts[record["status"]] += 1
        return counts

    def next_available_at(self) -> int | None:
        """`stats()["next_available_at"]`: when a reserve could next lease, or None.

        The smallest available_at of a ready task in a queue that is neither
        paused nor at its concurrency limit; for a queue whose rate window is
        full (its last n leases kept), no earlier than the window reopens.
        """
        times = []
        for record in self._tasks.values():
            if record["status"] != "ready":
                continue
            settings = self._settings(record["queue"])
            concurrency = settings["concurrency"]
            if settings["paused"] or (concurrency is not None and self._leased(record["queue"]) >= concurrency):
                continue
            time = record["available_at"]
            if settings["rate"] is not None and len(settings["recent"]) == settings["rate"][0]:
                time = max(time, settings["recent"][0] + settings["rate"][1])
            times.append(time)
        return min(times) if times else None

    def next_deadline(self) -> int | None:
        """`stats()["next_deadline"]`: the earliest deadline of a leased task, or None."""
        times = [r["deadline"] for r in self._tasks.values() if r["status"] == "leased"]
        return min(times) if times else None


class _BodySize:
    """The length of one transaction's frame body `{"ops":[...],"seq":S}`, grown op by op.

    Computed incrementally (the canonical JSON of the whole body is the base
    plus every op plus one comma between ops) so that a reserve of thousands
    of tasks stays linear.
    """

    def __init__(self, seq: int) -> None:
        self.size = len(canonical_json({"ops": [], "seq": seq}))
        self.count = 0

    def add(self, op: dict[str, Any]) -> bool:
        """Add `op` if the body stays within the frame bound; tell whether it did."""
        grown = self.size + len(canonical_json(op)) + (1 if self.count else 0)
        if grown > MAX_FRAME_BYTES:
            return False
        self.size = grown
        self.count += 1
        return True


def _lease(record: dict[str, Any]) -> Lease:
    """The lease a reserve or an extend hands out: the record's holder, token, lane and payload (copied)."""
    held = {name: record[name] for name in ("worker", "generation", "deadline", "attempts", "queue", "priority")}
    return Lease(task_id=record["task"], payload=_copy(record["payload"]), **held)


def _task(record: dict[str, Any]) -> Task:
    return Task(
        task_id=record["task"],
        key=record["key"],
        status=record["status"],
        payload=_copy(record["payload"]),
        available_at=record["available_at"],
        max_attempts=record["max_attempts"],
        attempts=record["attempts"],
        generation=record["generation"],
        worker=record["worker"],
        deadline=record["deadline"],
        last_error=None if record["last_error"] is None else dict(record["last_error"]),
        queue=record["queue"],
        priority=record["priority"],
    )


# ---------------------------------------------------------------------------
# Comparing a Queue with a Model


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


# ---------------------------------------------------------------------------
# Looking at a queue's directory


def directory_digest(directory: str | os.PathLike[str]) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under `directory` (to prove nothing was written)."""
    root = Path(directory)
    digest: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def read_frames(path: str | os.PathLike[str]) -> list[tuple[int, Any]]:
    """(offset, decoded body) of every frame of a segment, snapshot or CURRENT.

    Strict: any incomplete frame or digest mismatch is an `AssertionError`
    (this is a test helper, not the engine's reader). Zeros after the last
    frame (an open queue's preallocated segment) end the frames.
    """
    import json

    data = Path(path).read_bytes()
    frames: list[tuple[int, Any]] = []
    offset = 0
    end_of_frames = len(data.rstrip(b"\x00"))  # at least inside the last frame: its digest may end in zeros
    while offset < end_of_frames:
        assert offset + 4 <= len(data), f"{path}: incomplete length at {offset}"
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        end = offset + 4 + length + 32
        assert 1 <= length <= MAX_FRAME_BYTES and end <= len(data), f"{path}: bad frame at {offset}"
        body = data[offset + 4 : offset + 4 + length]
        assert hashlib.sha256(body).digest() == data[end - 32 : end], f"{path}: digest mismatch at {offset}"
        frames.append((offset, json.loads(body)))
        offset = end
    return frames


@contextmanager
def nothing_written(queue: Queue, directory: str | os.PathLike[str]) -> Iterator[None]:
    """Assert that the block changes no byte of `directory` and no sequence of `queue`."""
    before, seq = directory_digest(directory), queue.last_seq
    yield
    assert directory_digest(directory) == before, "the call changed the directory's bytes"
    assert queue.last_seq == seq


def wal_bodies(directory: str | os.PathLike[str]) -> list[Any]:
    """The decoded body of every WAL frame in `directory`, oldest segment first."""
    return [body for segment in sorted(Path(directory).glob("wal-*.log")) for _, body in read_frames(segment)]


#: The kinds of non-regular entry `place_special` can put where a store file is.
SPECIAL_KINDS = ("fifo", "directory", "dev-zero", "dev-null", "outside-file", "dangling")


def place_special(path: Path, kind: str, outside: Path | None = None) -> None:
    """Replace whatever is at `path` by a non-regular entry of `kind` (one of `SPECIAL_KINDS`).

    `outside-file` is a symlink to `outside`, a file beside the store; the
    others need no target. Used by the special-file tests and the
    environment campaign of tools/torture.py alike.
    """
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dev-null":
        path.symlink_to("/dev/null")
    elif kind == "outside-file":
        assert outside is not None
        path.symlink_to(outside)
    elif kind == "dangling":
        path.symlink_to(path.parent / "no-such-file")
    else:  # pragma: no cover
        raise AssertionError(kind)
