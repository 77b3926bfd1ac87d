"""`Client`: the `Queue` API over a `walqueue-serve` socket.

Code moves between `Queue(directory)` and `Client(socket_path)` by changing
the constructor: the methods, their arguments, their return types (`Lease`,
`Task`) and their exceptions (`KeyConflict`, `StaleLease`, `QueueClosed`,
`TypeError`/`ValueError` for bad arguments) are the same. What differs:

- A lost connection. A call whose retry is provably safe reconnects and
  retries, for up to `reconnect_seconds`: `put` and `put_many` (every task
  has an idempotency key, by default its task id, and an identical retry
  changes nothing), the reads (`get`, `tasks`, `stats`, `last_seq`),
  `wait`, and `compact` (which never changes what the queue answers).
  `reserve`, `ack` and `release` are never retried once their request may
  have been sent: a connection lost during one raises `ConnectionError`,
  and the caller cannot know whether it happened. (A connection that is
  found closed before anything is sent is replaced for any call.)
- `close()` closes the client's connections, not the server's queue; later
  calls raise `QueueClosed`. A `Fatal` answer (the server's queue was
  poisoned) raises `QueueClosed` too.
- Argument types are checked here (`TypeError`, as `Queue` raises it); the
  server checks the values, and its `BadRequest` is raised as `ValueError`.
- A lease token travels as `Lease.to_dict()`; one whose fields are
  ill-typed is a `ValueError` here, where `Queue` would call it stale.

One client may be shared between threads: each thread gets its own
connection (so one thread's long `wait` holds up no other), made on first
use. A forked child makes its own connections and never touches its
parent's.
"""

from __future__ import annotations

import json
import math
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from walqueue import KeyConflict, Lease, QueueClosed, StaleLease, Task, WalQueueError

__all__ = ["Client", "ServerError"]

DEFAULT_RECONNECT_SECONDS = 10.0
_RECV_BYTES = 2**16


class ServerError(WalQueueError):
    """An answer this client does not understand (a server of another version?)."""


def _check_type(value: Any, kind: type, what: str) -> None:
    if type(value) is not kind:
        raise TypeError(f"{what} must be {kind.__name__}, not {type(value).__name__}")


def _check_optional_str(value: Any, what: str) -> None:
    if value is not None:
        _check_type(value, str, what)


def _check_json(value: Any, what: str) -> None:
    """Exactly the types a payload may hold (Queue raises TypeError for any other)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if item is None or kind in (bool, int, str):
            continue
        if kind is float:
            if not math.isfinite(item):
                raise ValueError(f"{what} numbers must be finite")
            continue
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str:
                    raise TypeError(f"{what} keys must be str, not {type(key).__name__}")
                pending.append(child)
            continue
        if kind is list:
            pending.extend(item)
            continue
        raise TypeError(f"{what} cannot hold a {kind.__name__}")


def _check_payload(payload: Any, what: str = "payload") -> None:
    if type(payload) is not dict:
        raise TypeError(f"{what} must be a dict, not {type(payload).__name__}")
    _check_json(payload, what)


def _encode(request: Mapping[str, Any]) -> bytes:
    try:
        text = json.dumps(request, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: sent as its escape, and the server refuses it
        # with the very ValueError that Queue raises.
        return (json.dumps(request, allow_nan=False, separators=(",", ":")) + "\n").encode("ascii")


class _Connection:
    """One socket and its unread bytes; used by one thread at a time."""

    def __init__(self, path: str, timeout: float | None) -> None:
        self.pid = os.getpid()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self.buffer = bytearray()

    def looks_closed(self) -> bool:
        """True when the server closed this idle connection (readable at once, with no bytes)."""
        readable, _, _ = select.select([self.sock], [], [], 0)
        if not readable:
            return False
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def exchange(self, line: bytes, timeout: float | None) -> bytes:
        self.sock.settimeout(timeout)
        self.sock.sendall(line)
        while (newline := self.buffer.find(b"\n")) < 0:
            data = self.sock.recv(_RECV_BYTES)
            if not data:
                raise ConnectionResetError("the server closed the connection before answering")
            self.buffer += data
        answer = bytes(self.buffer[: newline + 1])
        del self.buffer[: newline + 1]
        return answer

    def close(self) -> None:
        if self.pid == os.getpid():
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.sock.close()


class Client:
    """`Queue`'s API, served by `walqueue-serve` on the Unix socket `socket_path`.

    `timeout`: seconds a call may take once sent (None: no limit; a `wait`
    gets its own timeout on top). `reconnect_seconds`: how long a safe
    call keeps reconnecting after losing its connection.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        timeout: float | None = 60.0,
        reconnect_seconds: float = DEFAULT_RECONNECT_SECONDS,
    ) -> None:
        self.socket_path = os.fspath(socket_path)
        self.timeout = timeout
        self.reconnect_seconds = reconnect_seconds
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._closed = False

    # -- plumbing ------------------------------------------------------------

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection of this client (never raises); later calls raise `QueueClosed`."""
        with self._lock:
            self._closed = True
            connections = list(self._all)
            self._all.clear()
        for connection in connections:
            try:
                connection.close()
            except OSError:
                pass

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"Client({self.socket_path!r}{', closed' if self._closed else ''})"

    def _connection(self) -> _Connection:
        """This thread's connection, made (or remade) when there is none that works."""
        if self._closed:
            raise QueueClosed("this client is closed")
        connection: _Connection | None = getattr(self._local, "connection", None)
        if connection is not None and (connection.pid != os.getpid() or connection.looks_closed()):
            self._drop(connection)  # a parent's socket only loses this process's handle
            connection = None
        if connection is None:
            connection = _Connection(self.socket_path, self.timeout)
            with self._lock:
                if self.closed:  # close() ran meanwhile, in another thread
                    connection.close()
                    raise QueueClosed("this client is closed")
                self._all.add(connection)
            self._local.connection = connection
        return connection

    def _drop(self, connection: _Connection) -> None:
        if getattr(self._local, "connection", None) is connection:
            self._local.connection = None
        with self._lock:
            self._all.discard(connection)
        try:
            connection.close()
        except OSError:
            pass

    def _call(self, request: dict[str, Any], *, retry: bool, extra_seconds: float = 0.0) -> dict[str, Any]:
        line = _encode(request)
        timeout = None if self.timeout is None else self.timeout + extra_seconds
        give_up_at: float | None = None
        pause = 0.02
        while True:
            sent = False
            try:
                connection = self._connection()
                sent = True
                raw = connection.exchange(line, timeout)
            except OSError as error:  # ConnectionError, TimeoutError, FileNotFoundError, ...
                if sent:
                    self._drop(connection)
                if sent and not retry:
                    raise ConnectionError(
                        f"the connection to {self.socket_path} was lost during {request['op']!r}: "
                        f"it may or may not have happened ({type(error).__name__}: {error})"
                    ) from error
                now = time.monotonic()
                if give_up_at is None:
                    give_up_at = now + self.reconnect_seconds
                if now >= give_up_at:
                    raise ConnectionError(
                        f"cannot reach walqueue-serve at {self.socket_path} "
                        f"for {self.reconnect_seconds:g} s ({type(error).__name__}: {error})"
                    ) from error
                time.sleep(min(pause, give_up_at - now))
                pause = min(pause * 2, 0.5)
                continue
            return self._result(json.loads(raw), request["op"], connection)

    def _result(self, answer: Any, op: str, connection: _Connection) -> dict[str, Any]:
        if not isinstance(answer, dict) or "ok" not in answer:
            raise ServerError(f"not an answer: {answer!r:.200}")
        if answer["ok"] is True:
            return answer
        name, message = answer.get("error"), answer.get("message", "")
        if name == "KeyConflict":
            raise KeyConflict(message)
        if name == "StaleLease":
            raise StaleLease(message)
        if name == "BadRequest":
            raise ValueError(message)
        if name == "Fatal":
            raise QueueClosed(f"the server's queue is closed: {message}")
        if name == "TooManyClients":
            self._drop(connection)
            raise ConnectionError(f"walqueue-serve refused the connection: {message}")
        raise ServerError(f"{name}: {message}")

    # -- the Queue API -------------------------------------------------------

    def put(
        self,
        task_id: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        available_at: int = 0,
        max_attempts: int = 3,
    ) -> str:
        _check_type(task_id, str, "task_id")
        _check_payload(payload)
        _check_optional_str(key, "key")
        _check_type(available_at, int, "available_at")
        _check_type(max_attempts, int, "max_attempts")
        request = {
            "op": "put",
            "task_id": task_id,
            "payload": payload,
            "key": key,
            "available_at": available_at,
            "max_attempts": max_attempts,
        }
        answer = self._call(request, retry=True)
        return str(answer["task_id"])

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
            raise TypeError(f"tasks must be an iterable of mappings, not {type(tasks).__name__}")
        items = []
        for index, task in enumerate(tasks):
            if not isinstance(task, Mapping):
                raise TypeError(f"tasks[{index}] must be a mapping, not {type(task).__name__}")
            unknown = set(task) - {"task_id", "payload", "key", "available_at", "max_attempts"}
            if unknown:
                raise TypeError(f"tasks[{index}] has unknown keys {sorted(map(str, unknown))}")
            if "task_id" not in task or "payload" not in task:
                raise TypeError(f"tasks[{index}] needs task_id and payload")
            _check_type(task["task_id"], str, f"tasks[{index}].task_id")
            _check_payload(task["payload"], f"tasks[{index}].payload")
            _check_optional_str(task.get("key"), f"tasks[{index}].key")
            for name in ("available_at", "max_attempts"):
                if name in task:
                    _check_type(task[name], int, f"tasks[{index}].{name}")
            items.append(dict(task))
        answer = self._call({"op": "put_many", "tasks": items}, retry=True)
        return [str(task_id) for task_id in answer["task_ids"]]

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[Lease]:
        _check_type(worker, str, "worker")
        for value, what in ((now, "now"), (lease_seconds, "lease_seconds"), (limit, "limit")):
            _check_type(value, int, what)
        request = {"op": "reserve", "worker": worker, "now": now, "lease_seconds": lease_seconds, "limit": limit}
        answer = self._call(request, retry=False)
        return [Lease.from_dict(lease) for lease in answer["leases"]]

    def ack(self, lease: Lease, *, now: int) -> None:
        _check_type(lease, Lease, "lease")
        _check_type(now, int, "now")
        self._call({"op": "ack", "lease": lease.to_dict(), "now": now}, retry=False)

    def release(self, lease: Lease, *, now: int, delay: int = 0) -> None:
        _check_type(lease, Lease, "lease")
        _check_type(now, int, "now")
        _check_type(delay, int, "delay")
        self._call({"op": "release", "lease": lease.to_dict(), "now": now, "delay": delay}, retry=False)

    def get(self, task_id: str) -> Task | None:
        _check_type(task_id, str, "task_id")
        task = self._call({"op": "get", "task_id": task_id}, retry=True)["task"]
        return None if task is None else Task(**task)

    def tasks(self, status: str | None = None) -> list[Task]:
        _check_optional_str(status, "status")
        answer = self._call({"op": "tasks", "status": status}, retry=True)
        return [Task(**task) for task in answer["tasks"]]

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self._call({"op": "stats"}, retry=True)["stats"]
        return stats

    @property
    def last_seq(self) -> int:
        return int(self.stats()["last_seq"])

    def compact(self) -> None:
        self._call({"op": "compact"}, retry=True)

    def wait(self, timeout: float) -> bool:
        """Block until another request commits a transaction (True) or `timeout` seconds pass (False).

        A long poll: commits since this thread's previous call count, so
        `reserve` finding nothing followed by `wait` misses no put made in
        between.
        """
        if type(timeout) not in (int, float):
            raise TypeError(f"timeout must be a number, not {type(timeout).__name__}")
        answer = self._call({"op": "wait", "timeout": timeout}, retry=True, extra_seconds=float(timeout))
        return bool(answer["committed"])
