"""The comparison backends of the benchmark (tools/bench/): SQLite, the fsync floor and the preallocated floor.

Both expose the same call surface as `walqueue.Queue` for what the benchmark
uses (`put`, `put_many`, `reserve`, `ack`, `release`, `close`), with the same
keyword names, so that one timing loop drives all three backends alike.

SqliteQueue
    The standard library's `sqlite3` implementing WALQueue's semantics (CONTRACT
    §2): a `tasks` table holding status, available_at, attempts, generation,
    worker, deadline and a unique key; `reserve` = reap + select by
    (available_at, task_id) through a partial index + update, in one
    transaction; `ack`/`release` checked on worker, generation and deadline
    in the UPDATE itself; the same argument validation (exact types, name
    sizes, payload round-trip rules), canonical JSON and identity hash as
    the engine. WAL journal; synchronous=FULL when durable, OFF otherwise.
    It is self-contained on purpose (it imports nothing from walqueue), so
    that speeding the engine up never moves the baseline. It is written to
    be a strong baseline: one reused JSON encoder, the payload encoded once
    and spliced into the identity text, a fast `executemany` path for
    `put_many` with an exact per-item fallback on any conflict.

FloorLog
    The least a WAL queue can do per commit: build one frame (4-byte length,
    canonical JSON of the transaction, SHA-256), `os.write` it and, when
    durable, `os.fsync`. No state, no validation, no index, no identity hash.
    Its reader (`floor_read`) is the least that reopening can do: read every
    frame of the given files, verify length and digest, parse the JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REAP_SQL",
    "SELECT_READY_SQL",
    "FloorLog",
    "KeyConflict",
    "SqliteLease",
    "SqliteQueue",
    "StaleLease",
    "floor_read",
]

#: What a baseline's `put` takes, as `Queue.put` does (the parts the benchmark uses).
Json = dict[str, Any]
Key = str | None

MAX_INT = 2**63 - 1
MAX_NAME_BYTES = 1024
MAX_FRAME_BYTES = 16 * 2**20
RECORD_MARGIN = 8192
MAX_PAYLOAD_DEPTH = 64
MAX_PAYLOAD_INT_BITS = 14_000

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_encode = _ENCODER.encode
_sha256 = hashlib.sha256


class KeyConflict(Exception):
    """Same meaning as walqueue.KeyConflict."""


class StaleLease(Exception):
    """Same meaning as walqueue.StaleLease."""


@dataclass(frozen=True, slots=True)
class SqliteLease:
    """The same token as walqueue.Lease."""

    task_id: str
    worker: str
    generation: int
    deadline: int
    attempts: int
    payload: dict[str, Any]


# -- validation: the rules of walqueue's validate module, written out again ---------


def _name(value: object, what: str) -> str:
    if type(value) is not str:
        raise TypeError(f"{what} must be a str")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > MAX_NAME_BYTES:
        raise ValueError(f"{what} is too long")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not UTF-8 encodable") from None
    if size > MAX_NAME_BYTES:
        raise ValueError(f"{what} is too long")
    return value


def _int(value: object, what: str, minimum: int = 0) -> int:
    if type(value) is not int:
        raise TypeError(f"{what} must be an int")
    if value < minimum or value > MAX_INT:
        raise ValueError(f"{what} out of range")
    return value


_SCALARS = frozenset({str, bool, type(None)})


def _payload_json(payload: object) -> bytes:
    """Canonical JSON of a payload that survives a round trip unchanged (the engine's rules)."""
    if type(payload) is not dict:
        raise TypeError("payload must be a dict")
    budget = MAX_FRAME_BYTES
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        container, depth = stack.pop()
        if type(container) is dict:
            for item_key in container:
                if type(item_key) is not str:
                    raise TypeError("payload keys must be str")
                budget -= len(item_key) + 4
            values: Iterable[Any] = container.values()
        else:
            budget -= 2 * len(container)
            values = container
        budget -= 2
        for item in values:
            kind = type(item)
            if kind in _SCALARS:
                if kind is str:
                    budget -= len(item)
            elif kind is int:
                if item.bit_length() > MAX_PAYLOAD_INT_BITS:
                    raise ValueError("payload int too large")
            elif kind is float:
                if not math.isfinite(item):
                    raise ValueError("payload float not finite")
            elif kind is dict or kind is list:
                if depth >= MAX_PAYLOAD_DEPTH:
                    raise ValueError("payload nests too deeply")
                stack.append((item, depth + 1))
            else:
                raise TypeError(f"payload value of type {kind.__name__} is not JSON")
        if budget < 0:
            raise ValueError("payload larger than a frame")
    try:
        return _encode(payload).encode("utf-8")
    except ValueError as exc:
        raise ValueError(f"payload not encodable: {exc}") from None


_PUT_NAMES = frozenset({"task_id", "payload", "key", "available_at", "max_attempts"})


def _put_row(
    task_id: object, payload: object, key: object = None, available_at: object = 0, max_attempts: object = 3
) -> tuple[str, str, bytes, str, int, int]:
    """Validate one put; return (task_id, key, identity, payload_text, available_at, max_attempts)."""
    task_id = _name(task_id, "task_id")
    key = task_id if key is None else _name(key, "key")
    payload_json = _payload_json(payload)
    available_at = _int(available_at, "available_at")
    max_attempts = _int(max_attempts, "max_attempts", 1)
    task_json = _encode(task_id).encode("utf-8")
    key_size = len(task_json) if key is task_id else len(_encode(key).encode("utf-8"))
    if len(payload_json) + len(task_json) + key_size + RECORD_MARGIN > MAX_FRAME_BYTES:
        raise ValueError("task too large")
    identity = _sha256(
        b'{"available_at":%d,"max_attempts":%d,"payload":%b,"task":%b}'
        % (available_at, max_attempts, payload_json, task_json)
    ).digest()
    return task_id, key, identity, payload_json.decode("utf-8"), available_at, max_attempts


def put_row_from_mapping(item: object) -> tuple[str, str, bytes, str, int, int]:
    if not isinstance(item, Mapping):
        raise TypeError("each put_many item must be a mapping")
    for name in item:
        if name not in _PUT_NAMES:
            raise TypeError(f"unexpected put argument {name!r}")
    if "task_id" not in item or "payload" not in item:
        raise TypeError("put_many item lacks task_id or payload")
    return _put_row(
        item["task_id"],
        item["payload"],
        item.get("key"),
        item.get("available_at", 0),
        item.get("max_attempts", 3),
    )


# -- the SQLite queue -------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id      TEXT PRIMARY KEY,
    key          TEXT NOT NULL UNIQUE,
    identity     BLOB NOT NULL,
    status       TEXT NOT NULL,
    payload      TEXT,
    available_at INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    attempts     INTEGER NOT NULL,
    generation   INTEGER NOT NULL,
    worker       TEXT,
    deadline     INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_ready ON tasks (available_at, task_id) WHERE status = 'ready';
CREATE INDEX IF NOT EXISTS tasks_leased ON tasks (deadline, task_id) WHERE status = 'leased';
"""

_INSERT = (
    "INSERT INTO tasks (task_id, key, identity, status, payload, available_at, max_attempts,"
    " attempts, generation, worker, deadline) VALUES (?, ?, ?, 'ready', ?, ?, ?, 0, 0, NULL, NULL)"
)
_BY_KEY = "SELECT task_id, identity FROM tasks WHERE key = ?"
_BY_ID = "SELECT 1 FROM tasks WHERE task_id = ?"
_REAP = (
    "UPDATE tasks SET status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END,"
    " available_at = deadline, worker = NULL, deadline = NULL"
    " WHERE status = 'leased' AND deadline <= ?"
)
_SELECT_READY = (
    "SELECT task_id, generation, attempts, payload FROM tasks"
    " WHERE status = 'ready' AND available_at <= ? ORDER BY available_at, task_id LIMIT ?"
)
_LEASE = (
    "UPDATE tasks SET status = 'leased', attempts = attempts + 1, generation = generation + 1,"
    " worker = ?, deadline = ? WHERE task_id = ?"
)
_ACK = (
    "UPDATE tasks SET status = 'completed', payload = NULL, worker = NULL, deadline = NULL"
    " WHERE task_id = ? AND status = 'leased' AND worker = ? AND generation = ? AND deadline > ?"
)
_RELEASE = (
    "UPDATE tasks SET status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END,"
    " available_at = ?, worker = NULL, deadline = NULL"
    " WHERE task_id = ? AND status = 'leased' AND worker = ? AND generation = ? AND deadline > ?"
)


class SqliteQueue:
    """WALQueue's API on one SQLite database file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], *, durable: bool) -> None:
        self.path = os.fspath(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL").fetchone()
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
        self._db.executescript(_SCHEMA)
        self._execute = self._db.execute

    def close(self) -> None:
        self._db.close()

    # -- writes -------------------------------------------------------------

    def _settle_conflict(self, row: tuple[str, str, bytes, str, int, int], planned: dict[str, bytes]) -> bool:
        """After a failed INSERT: True for an identical retry, else `KeyConflict`."""
        task_id, key, identity = row[0], row[1], row[2]
        known = planned.get(key)
        if known is None:
            found = self._execute(_BY_KEY, (key,)).fetchone()
            if found is not None:
                known = found[1]
        if known is not None:
            if known != identity:
                raise KeyConflict(f"key {key!r:.100} is already used by a different request")
            return True
        raise KeyConflict(f"task {task_id!r:.100} already exists under another key")

    def put(self, task_id: str, payload: Json, *, key: Key = None, available_at: int = 0, max_attempts: int = 3) -> str:
        row = _put_row(task_id, payload, key, available_at, max_attempts)
        try:
            self._execute(_INSERT, row)
        except sqlite3.IntegrityError:
            self._settle_conflict(row, {})
        return row[0]

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        if isinstance(tasks, (str, bytes, Mapping)):
            raise TypeError("put_many takes an iterable of mappings")
        rows = [put_row_from_mapping(item) for item in tasks]
        if not rows:
            return []
        db = self._db
        execute = self._execute
        execute("BEGIN IMMEDIATE")
        try:
            db.executemany(_INSERT, rows)
        except sqlite3.IntegrityError:
            # Some item is a retry or a conflict: redo the list item by item.
            execute("ROLLBACK")
            execute("BEGIN IMMEDIATE")
            try:
                planned: dict[str, bytes] = {}
                for row in rows:
                    try:
                        execute(_INSERT, row)
                    except sqlite3.IntegrityError:
                        self._settle_conflict(row, planned)
                    else:
                        planned[row[1]] = row[2]
            except BaseException:
                execute("ROLLBACK")
                raise
        except BaseException:
            execute("ROLLBACK")
            raise
        execute("COMMIT")
        return [row[0] for row in rows]

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[SqliteLease]:
        _name(worker, "worker")
        _int(now, "now")
        _int(lease_seconds, "lease_seconds", 1)
        _int(limit, "limit", 1)
        deadline = now + lease_seconds
        if deadline > MAX_INT:
            raise ValueError("now + lease_seconds too large")
        execute = self._execute
        execute("BEGIN IMMEDIATE")
        try:
            execute(_REAP, (now,))
            rows = execute(_SELECT_READY, (now, limit)).fetchall()
            leases = []
            loads = json.loads
            for task_id, generation, attempts, payload in rows:
                execute(_LEASE, (worker, deadline, task_id))
                leases.append(SqliteLease(task_id, worker, generation + 1, deadline, attempts + 1, loads(payload)))
        except BaseException:
            execute("ROLLBACK")
            raise
        execute("COMMIT")
        return leases

    def ack(self, lease: SqliteLease, *, now: int) -> None:
        if not isinstance(lease, SqliteLease):
            raise TypeError("lease must be a lease token")
        _int(now, "now")
        if self._execute(_ACK, (lease.task_id, lease.worker, lease.generation, now)).rowcount != 1:
            raise StaleLease(f"task {lease.task_id!r:.100}: the lease no longer owns it")

    def release(self, lease: SqliteLease, *, now: int, delay: int = 0) -> None:
        if not isinstance(lease, SqliteLease):
            raise TypeError("lease must be a lease token")
        _int(now, "now")
        _int(delay, "delay")
        if now + delay > MAX_INT:
            raise ValueError("now + delay too large")
        cursor = self._execute(_RELEASE, (now + delay, lease.task_id, lease.worker, lease.generation, now))
        if cursor.rowcount != 1:
            raise StaleLease(f"task {lease.task_id!r:.100}: the lease no longer owns it")

    # -- reads (used by the reopen workload and the tests) ---------------------

    def get(self, task_id: str) -> tuple[Any, ...] | None:
        _name(task_id, "task_id")
        row = self._execute(
            "SELECT task_id, key, status, payload, available_at, max_attempts, attempts, generation,"
            " worker, deadline FROM tasks WHERE task_id = ?",
            (task_id,),
        ).fetchone()
        if row is None:
            return None
        payload = None if row[3] is None else json.loads(row[3])
        return (*row[:3], payload, *row[4:])

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("ready", "leased", "completed", "dead"), 0)
        for status, count in self._execute("SELECT status, count(*) FROM tasks GROUP BY status"):
            counts[status] = count
        return counts

    def query_plan(self, sql: str, params: tuple[Any, ...]) -> str:
        """EXPLAIN QUERY PLAN text (the tests check that the indexes are used)."""
        return " | ".join(str(row[-1]) for row in self._execute("EXPLAIN QUERY PLAN " + sql, params))


SELECT_READY_SQL = _SELECT_READY
REAP_SQL = "SELECT task_id FROM tasks WHERE status = 'leased' AND deadline <= ?"


# -- the floor ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FloorLease:
    task_id: str
    worker: str
    generation: int
    deadline: int


class FloorLog:
    """One frame per commit, `os.write` + `os.fsync` (when durable), nothing else."""

    def __init__(self, path: str | os.PathLike[str], *, durable: bool) -> None:
        self.path = os.fspath(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._durable = durable
        self._seq = 0
        self._next_lease = 0
        self._leasable: list[str] = []

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _commit(self, ops: list[dict[str, Any]]) -> None:
        self._seq += 1
        body = _encode({"seq": self._seq, "ops": ops}).encode("utf-8")
        os.write(self._fd, len(body).to_bytes(4, "big") + body + _sha256(body).digest())
        if self._durable:
            os.fsync(self._fd)

    def put(self, task_id: str, payload: Json, *, key: Key = None, available_at: int = 0, max_attempts: int = 3) -> str:
        self._commit(
            [
                {
                    "op": "put",
                    "task": task_id,
                    "key": task_id if key is None else key,
                    "payload": payload,
                    "available_at": available_at,
                    "max_attempts": max_attempts,
                }
            ]
        )
        self._leasable.append(task_id)
        return task_id

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        ops = []
        for item in tasks:
            task_id = item["task_id"]
            ops.append(
                {
                    "op": "put",
                    "task": task_id,
                    "key": item.get("key", task_id),
                    "payload": item["payload"],
                    "available_at": item.get("available_at", 0),
                    "max_attempts": item.get("max_attempts", 3),
                }
            )
        if ops:
            self._commit(ops)
        ids = [op["task"] for op in ops]
        self._leasable.extend(ids)
        return ids

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[FloorLease]:
        # No index and no state: the floor leases the tasks in the order it wrote them.
        start = self._next_lease
        chosen = self._leasable[start : start + limit]
        if not chosen:
            return []
        self._next_lease = start + len(chosen)
        deadline = now + lease_seconds
        self._commit(
            [
                {"op": "lease", "task": task_id, "worker": worker, "generation": 1, "deadline": deadline}
                for task_id in chosen
            ]
        )
        return [FloorLease(task_id, worker, 1, deadline) for task_id in chosen]

    def ack(self, lease: FloorLease, *, now: int) -> None:
        self._commit([{"op": "ack", "task": lease.task_id, "generation": lease.generation}])


class PreallocatedFloorLog(FloorLog):
    """The floor on a preallocated file: `posix_fallocate` ahead, `os.pwrite` at the next offset, `fdatasync`.

    What a commit costs when it does not change the file's size (SQLite's
    reused WAL, a preallocated segment): the floor of issue 37's segments.
    Room is added `ROOM` bytes at a time, before the write that needs it.
    """

    ROOM = 16 * 2**20

    def __init__(self, path: str | os.PathLike[str], *, durable: bool) -> None:
        super().__init__(path, durable=durable)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._offset = 0
        self._room = 0
        self._sync = getattr(os, "fdatasync", os.fsync)

    def _commit(self, ops: list[dict[str, Any]]) -> None:
        self._seq += 1
        body = _encode({"seq": self._seq, "ops": ops}).encode("utf-8")
        frame = len(body).to_bytes(4, "big") + body + _sha256(body).digest()
        end = self._offset + len(frame)
        if end >= self._room:
            self._room = end - end % self.ROOM + self.ROOM
            os.posix_fallocate(self._fd, 0, self._room)
        os.pwrite(self._fd, frame, self._offset)
        self._offset = end
        if self._durable:
            self._sync(self._fd)


def floor_read(paths: Iterable[str]) -> int:
    """Read every frame of `paths`: check each length and digest, parse each body. Return the frame count."""
    frames = 0
    loads = json.loads
    for path in paths:
        with open(path, "rb") as file:
            data = file.read()
        view = memoryview(data)
        offset = 0
        size = len(data)
        while offset < size:
            length = int.from_bytes(view[offset : offset + 4], "big")
            if length < 1 or length > MAX_FRAME_BYTES or offset + 36 + length > size:
                raise ValueError(f"{path}: bad frame at {offset}")
            body = data[offset + 4 : offset + 4 + length]
            if _sha256(body).digest() != view[offset + 4 + length : offset + 36 + length]:
                raise ValueError(f"{path}: digest mismatch at {offset}")
            loads(body.decode("utf-8"))
            frames += 1
            offset += 36 + length
    return frames
