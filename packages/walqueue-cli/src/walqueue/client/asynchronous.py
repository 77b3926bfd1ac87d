"""`AsyncClient`: `Client` for asyncio, with any number of calls in flight on one connection.

The bytes are `walqueue.protocol.exchange.Exchange`'s, as for `Client`; this
module only moves them with asyncio's readiness callbacks. Calls share one
connection (the server answers in order, so no call waits for a round trip
of its own), except `wait`, which takes a connection of its own so that a
long poll holds up no other call. A line is written whole or the
connection is given up: a call counts as sent once its line reached the
server's socket, and one that did not is sent again whatever it is (a
server that closed an idle connection costs nothing). The retry rule for a
sent call is `Client`'s. A call cancelled in flight leaves the connection
as it is; its answer, when it comes, is dropped.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, Unpack

from walqueue import Lease, QueueClosed, Task
from walqueue.protocol import calltable as calls
from walqueue.protocol.exchange import ClientSettings, Exchange, Outcome, ServerError
from walqueue.protocol.putclock import PutClock
from walqueue.protocol.shaping import CompleteOptions, OutgoingCall, PutOptions, QueueSettings, named, outgoing

__all__ = ["AsyncClient"]

_RECV_BYTES = 2**16


class _Lost(Exception):
    """A connection ended with this call in flight; `sent`: its line had reached the server whole."""

    def __init__(self, error: BaseException, sent: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent


class _Link:
    """One connection, its `Exchange`, the futures of its calls in flight (oldest first) and their line ends."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.loop = loop
        self.exchange = Exchange()
        self.waiting: deque[tuple[asyncio.Future[Outcome[Any]], int]] = deque()
        self.out = bytearray()
        self.written = 0  # bytes handed to the kernel so far
        self.queued = 0  # bytes of lines made so far
        self.broken: BaseException | None = None
        loop.add_reader(sock.fileno(), self._on_readable)

    @classmethod
    async def connect(cls, path: str) -> _Link:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_connect(sock, path)
        except BaseException:
            sock.close()
            raise
        return cls(sock, loop)

    def submit(self, call: OutgoingCall[Any]) -> asyncio.Future[Outcome[Any]]:
        """Write `call`'s line (whole, or the connection is given up) and return the future of its outcome."""
        future: asyncio.Future[Outcome[Any]] = self.loop.create_future()
        line = self.exchange.send(call)
        self.queued += len(line)
        self.waiting.append((future, self.queued))
        if self.out:
            self.out += line
        else:
            try:
                sent = self.sock.send(line)
            except BlockingIOError:
                sent = 0
            except OSError as error:
                self.fail(error)
                return future
            self.written += sent
            if sent < len(line):
                self.out += line[sent:]
                self.loop.add_writer(self.sock.fileno(), self._on_writable)
        return future

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except BlockingIOError:
            return
        except OSError as error:
            self.fail(error)
            return
        self.written += sent
        del self.out[:sent]
        if not self.out:
            self.loop.remove_writer(self.sock.fileno())

    def _on_readable(self) -> None:
        try:
            data = self.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return
        except OSError as error:
            self.fail(error)
            return
        if not data:
            self.fail(ConnectionResetError("the server closed the connection before answering"))
            return
        try:
            answered = self.exchange.receive(data)
        except ServerError as error:  # out of step with the server: nothing more on it can be trusted
            self.fail(error)
            return
        for _, outcome in answered:
            future, _ = self.waiting.popleft()
            if not future.done():  # a cancelled caller's answer is dropped
                future.set_result(outcome)

    def fail(self, error: BaseException) -> None:
        """Give the connection up: each call in flight learns whether its line had been written whole."""
        if self.broken is not None:
            return
        self.broken = error
        fd = self.sock.fileno()
        if fd >= 0 and not self.loop.is_closed():
            self.loop.remove_reader(fd)
            self.loop.remove_writer(fd)
        self.sock.close()
        self.exchange.lost()
        while self.waiting:
            future, end = self.waiting.popleft()
            if not future.done():
                future.set_exception(_Lost(error, sent=end <= self.written))

    @property
    def idle(self) -> bool:
        return not self.waiting and self.broken is None


class AsyncClient(ClientSettings):
    """`Client` for asyncio: the same methods as coroutines; concurrent calls share one connection.

    `last_seq` is awaitable: ``await client.last_seq``. A `wait` counts the
    commits made since its connection's previous wait (or since it was
    opened): it may wake for a commit the caller already saw, never miss one
    made after the caller's previous call.
    """

    def _setup(self) -> None:
        self._put_clock = PutClock()  # the store's unit, for the put time stamped on puts (DECISIONS §46)
        self._shared: _Link | None = None
        self._idle_waits: list[_Link] = []

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection; calls in flight raise `QueueClosed`."""
        self._closed = True
        links = [*self._idle_waits, *([self._shared] if self._shared else [])]
        self._shared, self._idle_waits = None, []
        for link in links:
            link.fail(QueueClosed("this client is closed"))

    async def _link(self, call: OutgoingCall[Any]) -> _Link:
        if self._closed:
            raise QueueClosed("this client is closed")
        loop = asyncio.get_running_loop()
        if call.op == "wait":
            while self._idle_waits:
                link = self._idle_waits.pop()
                if link.idle and link.loop is loop:
                    return link
                link.fail(ConnectionAbortedError("not reused"))
            return await _Link.connect(self.socket_path)
        shared = self._shared
        if shared is not None and shared.loop is not loop:  # the client is used from another event loop now
            shared.fail(ConnectionAbortedError("the client moved to another event loop"))
        if self._shared is None or self._shared.broken is not None:
            self._shared = None
            link = await _Link.connect(self.socket_path)
            if self.closed:
                link.fail(QueueClosed("this client is closed"))
                raise QueueClosed("this client is closed")
            self._shared = link
        return self._shared

    async def _submit[T](self, call: OutgoingCall[T]) -> T:
        rule = self._retry_rule()
        timeout = self._call_timeout(call.extra_seconds)
        while True:
            try:
                link = await self._link(call)
            except OSError as error:  # nothing was sent
                await asyncio.sleep(rule.pause(error))
                continue
            try:
                outcome: Outcome[T] = await asyncio.wait_for(asyncio.shield(link.submit(call)), timeout)
            except TimeoutError as error:
                link.fail(error)  # the server stopped answering: give this connection up
                lost = _Lost(error, sent=True)
            except _Lost as error:
                lost = error
            else:
                if isinstance(outcome.error, ConnectionRefusedError):
                    link.fail(outcome.error)
                elif call.op == "wait" and not self._closed:
                    self._idle_waits.append(link)
                return outcome.unwrap()
            if self.closed:
                raise QueueClosed("this client is closed") from lost.error
            refusal = rule.lost(call, lost.error) if lost.sent else None
            if refusal is not None:
                raise refusal
            await asyncio.sleep(rule.pause(lost.error))

    # -- the Queue API, as coroutines ------------------------------------------------------

    async def call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """`Client.call` as a coroutine: the call `name` of the table, made as ``queue.NAME(*args, **kwargs)``."""
        return await self._submit(outgoing(named(name), *args, **kwargs))

    async def put(self, task_id: str, payload: dict[str, Any], **options: Unpack[PutOptions]) -> str:
        return await self._submit(outgoing(calls.PUT, task_id, payload, **(await self._stamper()).options(options)))

    async def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        return await self._submit(outgoing(calls.PUT_MANY, (await self._stamper()).items(tasks)))

    async def _stamper(self) -> PutClock:
        """The client's `PutClock`, asking the store's unit first when it does not know it yet (as `Client`)."""
        if self._put_clock.should_ask():
            self._put_clock.learn(await self.stats())
        return self._put_clock

    async def reserve(
        self, worker: str, *, now: int, lease_seconds: int, limit: int = 1, queues: list[str] | None = None
    ) -> list[Lease]:
        return await self._submit(
            outgoing(calls.RESERVE, worker, now=now, lease_seconds=lease_seconds, limit=limit, queues=queues)
        )

    async def ack(self, lease: Lease, *, now: int) -> None:
        return await self._submit(outgoing(calls.ACK, lease, now=now))

    async def ack_many(self, leases: Iterable[Lease], *, now: int) -> None:
        return await self._submit(outgoing(calls.ACK_MANY, leases, now=now))

    async def complete(self, lease: Lease, *, now: int, **options: Unpack[CompleteOptions]) -> None:
        """`Queue.complete`: ack + result + follow-up puts in one transaction. Never retried once sent."""
        return await self._submit(outgoing(calls.COMPLETE, lease, now=now, **options))

    async def result(self, task_id: str, *, now: int | None = None) -> dict[str, Any] | None:
        """`Queue.result`: a completed task's stored result, or None."""
        return await self._submit(outgoing(calls.RESULT, task_id, now=now))

    async def release(self, lease: Lease, *, now: int, delay: int = 0, error: Mapping[str, str] | None = None) -> None:
        return await self._submit(outgoing(calls.RELEASE, lease, now=now, delay=delay, error=error))

    async def fail(self, lease: Lease, *, now: int, error: Mapping[str, str] | None = None) -> None:
        """`Queue.fail`: the leased task is dead at once (a permanent failure). Never retried once sent."""
        return await self._submit(outgoing(calls.FAIL, lease, now=now, error=error))

    async def give_back(self, lease: Lease, *, now: int) -> None:
        """`Queue.give_back`: an unstarted lease returned, its attempt restored. Never retried once sent."""
        return await self._submit(outgoing(calls.GIVE_BACK, lease, now=now))

    async def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease:
        return await self._submit(outgoing(calls.EXTEND, lease, now=now, lease_seconds=lease_seconds))

    async def redrive(self, task_id: str, *, available_at: int, extra_attempts: int = 1) -> None:
        return await self._submit(
            outgoing(calls.REDRIVE, task_id, available_at=available_at, extra_attempts=extra_attempts)
        )

    async def cancel(self, task_id: str, *, error: Mapping[str, str] | None = None, now: int | None = None) -> None:
        return await self._submit(outgoing(calls.CANCEL, task_id, error=error, now=now))

    async def get(self, task_id: str) -> Task | None:
        return await self._submit(outgoing(calls.GET, task_id))

    async def tasks(self, status: str | None = None, *, queue: str | None = None) -> list[Task]:
        return await self._submit(outgoing(calls.TASKS, status, queue=queue))

    async def configure_queue(self, name: str, **settings: Unpack[QueueSettings]) -> None:
        """`Queue.configure_queue`: only the settings given change (None clears a limit)."""
        return await self._submit(outgoing(calls.CONFIGURE_QUEUE, name, **settings))

    async def queues(self) -> list[dict[str, Any]]:
        """`Queue.queues`: every queue with its settings and counts."""
        return await self._submit(outgoing(calls.QUEUES))

    async def stats(self) -> dict[str, Any]:
        return await self._submit(outgoing(calls.STATS))

    async def set_clock(self, units_per_second: int) -> None:
        return await self._submit(outgoing(calls.CLOCK, units_per_second))

    async def metrics(self, *, now: int | None = None) -> dict[str, Any]:
        """`Queue.metrics`: the server's counters since it opened the queue, gauges and histograms."""
        return await self._submit(outgoing(calls.METRICS, now=now))

    async def page(
        self, status: str, *, after: str | None = None, limit: int = 100, queue: str | None = None
    ) -> list[Task]:
        """`Queue.page`: up to `limit` tasks with `status` whose ids sort after `after` (a bounded `tasks`)."""
        return await self._submit(outgoing(calls.PAGE, status, after=after, limit=limit, queue=queue))

    @property
    def last_seq(self) -> Awaitable[int]:
        async def read() -> int:
            return int((await self.stats())["last_seq"])

        return read()

    async def compact(self) -> None:
        return await self._submit(outgoing(calls.COMPACT))

    async def wait(self, timeout: float) -> bool:
        """`Client.wait` as a coroutine, on a connection of its own (see the class's docstring)."""
        return await self._submit(outgoing(calls.WAIT, timeout))
