"""`Client`: the `Queue` API over a `walqueue-serve` socket.

Code moves between `Queue(directory)` and `Client(socket_path)` by changing
the constructor: the methods, their arguments, their return types (`Lease`,
`Task`) and their exceptions (`KeyConflict`, `StaleLease`, `WrongStatus`,
`QueueClosed`, `TypeError`/`ValueError` for bad arguments) are the same.
What differs:

- A lost connection. A call whose retry is provably safe reconnects and
  retries, for up to `reconnect_seconds`: `put` and `put_many` (every task
  has an idempotency key, by default its task id, and an identical retry
  changes nothing), the reads (`get`, `tasks`, `stats`, `last_seq`),
  `wait`, and `compact` (which never changes what the queue answers).
  `reserve`, `ack`, `release`, `extend`, `redrive` and `cancel` are never
  retried once their request may have been sent: a connection lost during
  one raises `ConnectionError`, and the caller cannot know whether it
  happened (a retried cancel or redrive that had happened would answer
  `WrongStatus` for a call that succeeded; a retried reserve would lease
  twice). A connection that is found closed before anything is sent is
  replaced for any call.
- `close()` closes the client's connections, not the server's queue; later
  calls raise `QueueClosed`. A `Fatal` answer (the server's queue was
  poisoned) raises `QueueClosed` too.
- Argument types are checked here (`TypeError`, as `Queue` raises it); the
  server checks the values, and its `BadRequest` is raised as `ValueError`.
- A lease token travels as its `task_id`, `worker` and `generation` only
  (the only fields the queue reads; the payload need not travel back). One
  whose fields are ill-typed is a `ValueError` here, where `Queue` would
  call it stale.

One client may be shared between threads: each thread gets its own
connection (so one thread's long `wait` holds up no other), made on first
use. A forked child makes its own connections and never touches its
parent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from walqueue import KeyConflict, Lease, QueueClosed, StaleLease, Task, WalQueueError, WrongStatus

__all__ = ["AsyncClient", "Client", "ServerError"]

DEFAULT_RECONNECT_SECONDS = 10.0
_RECV_BYTES = 2**16
#: The longest answer line an AsyncClient reads (asyncio's default is 64 KiB; `tasks()` can be far longer).
_ASYNC_LINE_LIMIT = 2**40


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


#: The error names of the protocol that are raised as the exception `Queue` raises for the same failure.
_ERRORS: dict[str, type[Exception]] = {
    "KeyConflict": KeyConflict,
    "StaleLease": StaleLease,
    "WrongStatus": WrongStatus,
    "BadRequest": ValueError,
}


def _result(answer: Any) -> dict[str, Any]:
    """A success answer as it is; a failure as the exception `Queue` would raise."""
    if not isinstance(answer, dict) or "ok" not in answer:
        raise ServerError(f"not an answer: {answer!r:.200}")
    if answer["ok"] is True:
        return answer
    name, message = answer.get("error"), answer.get("message", "")
    if isinstance(name, str) and name in _ERRORS:
        raise _ERRORS[name](message)
    if name == "Fatal":
        raise QueueClosed(f"the server's queue is closed: {message}")
    if name == "TooManyClients":
        raise ConnectionError(f"walqueue-serve refused the connection: {message}")
    raise ServerError(f"{name}: {message}")


@dataclass(frozen=True, slots=True)
class _Plan:
    """One call, checked and ready to send: the request, whether a retry is safe, what to return."""

    request: dict[str, Any]
    retry: bool
    convert: Callable[[dict[str, Any]], Any]
    extra_seconds: float = 0.0


def _nothing(answer: dict[str, Any]) -> None:
    return None


def plan_put(task_id: str, payload: dict[str, Any], key: str | None, available_at: int, max_attempts: int) -> _Plan:
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
    return _Plan(request, True, lambda answer: str(answer["task_id"]))


def plan_put_many(tasks: Iterable[Mapping[str, Any]]) -> _Plan:
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
    return _Plan({"op": "put_many", "tasks": items}, True, lambda answer: [str(t) for t in answer["task_ids"]])


def plan_reserve(worker: str, now: int, lease_seconds: int, limit: int) -> _Plan:
    _check_type(worker, str, "worker")
    for value, what in ((now, "now"), (lease_seconds, "lease_seconds"), (limit, "limit")):
        _check_type(value, int, what)
    request = {"op": "reserve", "worker": worker, "now": now, "lease_seconds": lease_seconds, "limit": limit}
    return _Plan(request, False, lambda answer: [Lease.from_dict(lease) for lease in answer["leases"]])


def _token(lease: Lease) -> dict[str, Any]:
    """What the server reads of a lease: its owner's three fields (a large payload need not travel back)."""
    _check_type(lease, Lease, "lease")
    return {"task_id": lease.task_id, "worker": lease.worker, "generation": lease.generation}


def plan_ack(lease: Lease, now: int) -> _Plan:
    token = _token(lease)
    _check_type(now, int, "now")
    return _Plan({"op": "ack", "lease": token, "now": now}, False, _nothing)


def plan_release(lease: Lease, now: int, delay: int) -> _Plan:
    token = _token(lease)
    _check_type(now, int, "now")
    _check_type(delay, int, "delay")
    return _Plan({"op": "release", "lease": token, "now": now, "delay": delay}, False, _nothing)


def plan_extend(lease: Lease, now: int, lease_seconds: int) -> _Plan:
    token = _token(lease)
    _check_type(now, int, "now")
    _check_type(lease_seconds, int, "lease_seconds")
    request = {"op": "extend", "lease": token, "now": now, "lease_seconds": lease_seconds}
    return _Plan(request, False, lambda answer: Lease.from_dict(answer["lease"]))


def plan_redrive(task_id: str, available_at: int, extra_attempts: int) -> _Plan:
    _check_type(task_id, str, "task_id")
    _check_type(available_at, int, "available_at")
    _check_type(extra_attempts, int, "extra_attempts")
    request = {"op": "redrive", "task_id": task_id, "available_at": available_at, "extra_attempts": extra_attempts}
    return _Plan(request, False, _nothing)


def plan_cancel(task_id: str) -> _Plan:
    _check_type(task_id, str, "task_id")
    return _Plan({"op": "cancel", "task_id": task_id}, False, _nothing)


def plan_get(task_id: str) -> _Plan:
    _check_type(task_id, str, "task_id")
    return _Plan(
        {"op": "get", "task_id": task_id},
        True,
        lambda answer: None if answer["task"] is None else Task(**answer["task"]),
    )


def plan_tasks(status: str | None) -> _Plan:
    _check_optional_str(status, "status")
    return _Plan({"op": "tasks", "status": status}, True, lambda answer: [Task(**t) for t in answer["tasks"]])


def plan_stats() -> _Plan:
    return _Plan({"op": "stats"}, True, lambda answer: answer["stats"])


def plan_compact() -> _Plan:
    return _Plan({"op": "compact"}, True, _nothing)


def plan_wait(timeout: float) -> _Plan:
    if type(timeout) not in (int, float):
        raise TypeError(f"timeout must be a number, not {type(timeout).__name__}")
    return _Plan({"op": "wait", "timeout": timeout}, True, lambda answer: bool(answer["committed"]), float(timeout))


class _Reconnect:
    """The reconnect rule of both clients for one call: after a failed try, may it try again, and when?

    A request that may have been sent is tried again only for a safe call
    (`_Plan.retry`); while it cannot have been sent, any call tries again.
    The pauses double from 20 ms up to 0.5 s, until `seconds` have passed
    since the first failure.
    """

    def __init__(self, socket_path: str, seconds: float, plan: _Plan) -> None:
        self._socket_path = socket_path
        self._seconds = seconds
        self._op = plan.request["op"]
        self._retry = plan.retry
        self._give_up_at: float | None = None
        self._pause = 0.02

    def pause(self, error: BaseException, sent: bool) -> float:
        """Seconds to sleep before the next try; raises `ConnectionError` when there must be none."""
        if sent and not self._retry:
            raise ConnectionError(
                f"the connection to {self._socket_path} was lost during {self._op!r}: "
                f"it may or may not have happened ({type(error).__name__}: {error})"
            ) from error
        now = time.monotonic()
        if self._give_up_at is None:
            self._give_up_at = now + self._seconds
        if now >= self._give_up_at:
            raise ConnectionError(
                f"cannot reach walqueue-serve at {self._socket_path} "
                f"for {self._seconds:g} s ({type(error).__name__}: {error})"
            ) from error
        pause = min(self._pause, self._give_up_at - now)
        self._pause = min(self._pause * 2, 0.5)
        return pause


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

    def _plan(self, plan: _Plan) -> Any:
        line = _encode(plan.request)
        timeout = None if self.timeout is None else self.timeout + plan.extra_seconds
        reconnect = _Reconnect(self.socket_path, self.reconnect_seconds, plan)
        while True:
            sent = False
            try:
                connection = self._connection()
                sent = True
                raw = connection.exchange(line, timeout)
            except OSError as error:  # ConnectionError, TimeoutError, FileNotFoundError, ...
                if sent:
                    self._drop(connection)
                time.sleep(reconnect.pause(error, sent))
                continue
            try:
                return plan.convert(_result(json.loads(raw)))
            except ConnectionError:  # TooManyClients: the server closes this connection
                self._drop(connection)
                raise

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
        result: str = self._plan(plan_put(task_id, payload, key, available_at, max_attempts))
        return result

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        result: list[str] = self._plan(plan_put_many(tasks))
        return result

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[Lease]:
        result: list[Lease] = self._plan(plan_reserve(worker, now, lease_seconds, limit))
        return result

    def ack(self, lease: Lease, *, now: int) -> None:
        self._plan(plan_ack(lease, now))

    def release(self, lease: Lease, *, now: int, delay: int = 0) -> None:
        self._plan(plan_release(lease, now, delay))

    def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease:
        """`Queue.extend`: a heartbeat; returns the token with the new deadline. Never retried."""
        result: Lease = self._plan(plan_extend(lease, now, lease_seconds))
        return result

    def redrive(self, task_id: str, *, available_at: int, extra_attempts: int = 1) -> None:
        """`Queue.redrive`: a dead task is ready again at `available_at`. Never retried."""
        self._plan(plan_redrive(task_id, available_at, extra_attempts))

    def cancel(self, task_id: str) -> None:
        """`Queue.cancel`: a ready or leased task becomes dead. Never retried."""
        self._plan(plan_cancel(task_id))

    def get(self, task_id: str) -> Task | None:
        result: Task | None = self._plan(plan_get(task_id))
        return result

    def tasks(self, status: str | None = None) -> list[Task]:
        result: list[Task] = self._plan(plan_tasks(status))
        return result

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._plan(plan_stats())
        return result

    @property
    def last_seq(self) -> int:
        return int(self.stats()["last_seq"])

    def compact(self) -> None:
        self._plan(plan_compact())

    def wait(self, timeout: float) -> bool:
        """Block until another request commits a transaction (True) or `timeout` seconds pass (False).

        A long poll: commits since this thread's previous call count, so
        `reserve` finding nothing followed by `wait` misses no put made in
        between.
        """
        result: bool = self._plan(plan_wait(timeout))
        return result


class AsyncClient:
    """`Client` for asyncio: the same methods as coroutines, on asyncio streams.

    Concurrent calls each take an idle connection or open one, and give it
    back when answered; the retry rules are `Client`'s. A call cancelled
    while in flight closes its connection (its outcome, like that of a lost
    connection, is unknown for the calls that are never retried).
    `last_seq` is awaitable: ``await client.last_seq``.
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
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Close the idle connections; calls in flight close theirs when they end."""
        self._closed = True
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._closed:
            raise QueueClosed("this client is closed")
        while self._idle:
            reader, writer = self._idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        return await asyncio.open_unix_connection(self.socket_path, limit=_ASYNC_LINE_LIMIT)

    async def _plan(self, plan: _Plan) -> Any:
        line = _encode(plan.request)
        timeout = None if self.timeout is None else self.timeout + plan.extra_seconds
        reconnect = _Reconnect(self.socket_path, self.reconnect_seconds, plan)
        while True:
            sent = False
            writer: asyncio.StreamWriter | None = None
            healthy = False
            try:
                reader, writer = await self._connection()
                sent = True
                writer.write(line)
                await writer.drain()
                raw = await asyncio.wait_for(reader.readline(), timeout)
                if not raw.endswith(b"\n"):
                    raise ConnectionResetError("the server closed the connection before answering")
                healthy = True
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as error:
                await asyncio.sleep(reconnect.pause(error, sent))
                continue
            finally:
                if writer is not None and not healthy:
                    writer.close()
            answer = json.loads(raw)
            if answer.get("error") == "TooManyClients":
                writer.close()
            elif not self._closed:
                self._idle.append((reader, writer))
            else:
                writer.close()
            return plan.convert(_result(answer))

    async def put(
        self,
        task_id: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        available_at: int = 0,
        max_attempts: int = 3,
    ) -> str:
        result: str = await self._plan(plan_put(task_id, payload, key, available_at, max_attempts))
        return result

    async def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        result: list[str] = await self._plan(plan_put_many(tasks))
        return result

    async def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[Lease]:
        result: list[Lease] = await self._plan(plan_reserve(worker, now, lease_seconds, limit))
        return result

    async def ack(self, lease: Lease, *, now: int) -> None:
        await self._plan(plan_ack(lease, now))

    async def release(self, lease: Lease, *, now: int, delay: int = 0) -> None:
        await self._plan(plan_release(lease, now, delay))

    async def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease:
        result: Lease = await self._plan(plan_extend(lease, now, lease_seconds))
        return result

    async def redrive(self, task_id: str, *, available_at: int, extra_attempts: int = 1) -> None:
        await self._plan(plan_redrive(task_id, available_at, extra_attempts))

    async def cancel(self, task_id: str) -> None:
        await self._plan(plan_cancel(task_id))

    async def get(self, task_id: str) -> Task | None:
        result: Task | None = await self._plan(plan_get(task_id))
        return result

    async def tasks(self, status: str | None = None) -> list[Task]:
        result: list[Task] = await self._plan(plan_tasks(status))
        return result

    async def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._plan(plan_stats())
        return result

    @property
    def last_seq(self) -> Awaitable[int]:
        async def read() -> int:
            return int((await self.stats())["last_seq"])

        return read()

    async def compact(self) -> None:
        await self._plan(plan_compact())

    async def wait(self, timeout: float) -> bool:
        """`Client.wait` as a coroutine (commits since this connection's previous call count)."""
        result: bool = await self._plan(plan_wait(timeout))
        return result
