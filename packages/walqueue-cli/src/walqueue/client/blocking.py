"""`Client`: the `Queue` API over a `walqueue-serve` socket, and `Pipeline`: many calls in one round trip.

Code moves between `Queue(directory)` and `Client(socket_path)` by changing
the constructor: the methods, their arguments, their return types (`Lease`,
`Task`) and their exceptions are the same. Arguments are checked here by the
engine's own rules (`walqueue.protocol.shaping`), so a bad one raises what
`Queue` raises, before anything is sent. What differs:

- A lost connection. A call is *sent* once its whole line reached the
  server's socket; one that was not is simply sent again on a new
  connection, whatever it is. A sent call whose answer was lost is sent
  again only if that is provably safe (`CALLS[name].retry`: `put`,
  `put_many`, the reads, `wait`, `compact`), for up to
  `reconnect_seconds`; `reserve`, `ack`, `release`, `extend`, `redrive`
  and `cancel` then raise `ConnectionError` ("it may or may not have
  happened"): a retried cancel that had happened would answer
  `WrongStatus` for a call that succeeded, a retried reserve would lease
  twice. A connection the server closed while it was idle fails the first
  write at once, so the call goes out again on a new connection.
- `close()` closes the client's connections, not the server's queue; later
  calls raise `QueueClosed`, as does a `Fatal` answer (the server's queue
  was poisoned).
- `wait` counts commits made since this thread's previous call.

One client may be shared between threads: each thread gets its own
connection (so one thread's long `wait` holds up no other), made on first
use. A forked child makes its own and never touches its parent's. Sockets
are watched with `poll`, never `select`, so a process with thousands of
open files is no different.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Unpack

from walqueue import Lease, QueueClosed, Task
from walqueue.protocol import calltable as calls
from walqueue.protocol.exchange import ClientSettings, Exchange, Outcome, RetryRule, ServerError
from walqueue.protocol.putclock import PutClock
from walqueue.protocol.shaping import CompleteOptions, OutgoingCall, PutOptions, QueueSettings, named, outgoing

__all__ = ["Client", "Pipeline", "ServerError"]

_RECV_BYTES = 2**16


class _Connection:
    """One blocking-free socket, its `Exchange`, and the process that made it; used by one thread at a time."""

    def __init__(self, path: str, timeout: float | None) -> None:
        self.pid = os.getpid()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise
        self.exchange = Exchange()
        # One poll object for the connection's life: made and registered per call, it cost more than the poll.
        self.poller = select.poll()
        self.fd = self.sock.fileno()
        self.poller.register(self.fd, select.POLLIN)

    def run(
        self, calls: Sequence[OutgoingCall[Any]], timeout: float | None
    ) -> tuple[list[Outcome[Any]], int, OSError | None]:
        """Send every call and read every answer, interleaved; never blocks on one direction alone.

        Returns the outcomes of the calls answered (oldest first), how many
        calls were written whole, and the error that ended the exchange early
        (None when every call was answered). `timeout`: seconds without
        progress in either direction.
        """
        exchange = self.exchange
        lines = [exchange.send(call) for call in calls]
        ends: list[int] = []
        total = 0
        for line in lines:
            total += len(line)
            ends.append(total)
        out = memoryview(lines[0] if len(lines) == 1 else b"".join(lines))
        offset = 0
        outcomes: list[Outcome[Any]] = []
        poller, fd, sock = self.poller, self.fd, self.sock
        wait_ms = None if timeout is None else max(1, int(timeout * 1000))
        watching_out = False
        try:
            while len(outcomes) < len(calls):
                if offset < total:
                    try:
                        offset += sock.send(out[offset:] if offset else out)
                    except BlockingIOError:
                        pass
                if watching_out != (offset < total):  # POLLOUT only while a line waits for room
                    watching_out = offset < total
                    poller.modify(fd, select.POLLIN | (select.POLLOUT if watching_out else 0))
                if not poller.poll(wait_ms):
                    raise TimeoutError(f"no progress for {timeout:g} s")
                try:
                    data = sock.recv(_RECV_BYTES)
                except BlockingIOError:
                    continue
                if not data:
                    raise ConnectionResetError("the server closed the connection before answering")
                outcomes.extend(outcome for _, outcome in exchange.receive(data))
        except (OSError, ServerError) as error:
            if watching_out:
                poller.modify(fd, select.POLLIN)
            outcomes += self._answers_left(len(calls) - len(outcomes))
            exchange.lost()
            lost = error if isinstance(error, OSError) else ConnectionResetError(f"out of step: {error}")
            return outcomes, sum(1 for end in ends if end <= offset), lost
        return outcomes, len(calls), None

    def _answers_left(self, wanted: int) -> list[Outcome[Any]]:
        """Answers the server wrote before the connection failed (a `TooManyClients` refusal, say)."""
        outcomes: list[Outcome[Any]] = []
        try:
            while len(outcomes) < wanted and (data := self.sock.recv(_RECV_BYTES, socket.MSG_DONTWAIT)):
                outcomes += [outcome for _, outcome in self.exchange.receive(data)]
        except (OSError, ServerError):
            pass
        return outcomes[:wanted]

    def close(self) -> None:
        if self.pid == os.getpid():
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.sock.close()


class Client(ClientSettings):
    """`Queue`'s API, served by `walqueue-serve` on the Unix socket `socket_path` (settings: `ClientSettings`)."""

    #: How this source sends several calls together, for the worker (walqueue.worker.source): `pipeline()`.
    grouping: Final = "pipeline"

    def _setup(self) -> None:
        self._put_clock = PutClock()  # the store's unit, for the put time stamped on puts (DECISIONS §46)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: weakref.WeakSet[_Connection] = weakref.WeakSet()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection of this client (all threads'); later calls raise `QueueClosed`."""
        with self._lock:
            self._closed = True
            connections = list(self._all)
            self._all.clear()
        for connection in connections:
            try:
                connection.close()
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"Client({self.socket_path!r}{', closed' if self._closed else ''})"

    def pipeline(self) -> Pipeline:
        """A `Pipeline` on this client: collect calls, then `execute()` sends them all in one round trip."""
        return Pipeline(self)

    # -- plumbing ------------------------------------------------------------------------

    def _connection(self) -> _Connection:
        """This thread's connection, made (or remade) when there is none that works."""
        if self._closed:
            raise QueueClosed("this client is closed")
        connection: _Connection | None = getattr(self._local, "connection", None)
        # A connection the server closed needs no check here: writing to it fails at once (EPIPE), so
        # the call counts as not sent and goes out again on a new connection, whatever it is.
        if connection is not None and connection.pid != os.getpid():
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

    def _run(self, calls: Sequence[OutgoingCall[Any]]) -> list[Outcome[Any]]:
        """Every call's outcome, in order: sent together, re-sent after a lost connection where that is safe."""
        results: list[Outcome[Any] | None] = [None] * len(calls)
        todo = list(range(len(calls)))
        rule = self._retry_rule()
        timeout = self._call_timeout(calls[0].extra_seconds if len(calls) == 1 else max(c.extra_seconds for c in calls))
        while todo:
            try:
                connection = self._connection()
            except OSError as unreachable:  # nothing was sent
                time.sleep(rule.pause(unreachable))
                continue
            try:
                outcomes, written, lost = connection.run([calls[i] for i in todo], timeout)
            except BaseException:  # KeyboardInterrupt mid-exchange: its answers must never meet a later call
                self._drop(connection)
                raise
            for index, outcome in zip(todo, outcomes, strict=False):
                results[index] = outcome
            refused = next((o.error for o in outcomes if isinstance(o.error, ConnectionRefusedError)), None)
            if refused is not None:  # TooManyClients: the server executed none of them
                self._drop(connection)
                for index in todo[len(outcomes) :]:
                    results[index] = Outcome(error=refused)
                break
            if lost is None:
                break
            self._drop(connection)
            todo = self._unanswered(calls, todo, len(outcomes), written, lost, rule, results)
            if todo:
                time.sleep(rule.pause(lost))
        return [result if result is not None else Outcome(error=ServerError("no answer")) for result in results]

    @staticmethod
    def _unanswered(
        calls: Sequence[OutgoingCall[Any]],
        todo: list[int],
        answered: int,
        written: int,
        error: OSError,
        rule: RetryRule,
        results: list[Outcome[Any] | None],
    ) -> list[int]:
        """The calls to send again; a sent one that is not retry-safe gets its `ConnectionError` instead."""
        again = []
        for position, index in enumerate(todo[answered:], start=answered):
            refusal = rule.lost(calls[index], error) if position < written else None
            if refusal is None:
                again.append(index)
            else:
                results[index] = Outcome(error=refusal)
        return again

    def _submit[T](self, call: OutgoingCall[T]) -> T:
        outcome: Outcome[T] = self._run([call])[0]
        return outcome.unwrap()

    # -- the Queue API -------------------------------------------------------------------

    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """The call `name` of the table of calls, made as ``queue.NAME(*args, **kwargs)``.

        Every call has a typed method below; this is the same path, by name
        (a call just added to the table works here before it has a method).
        An unknown name is `ValueError`, and nothing is sent.
        """
        return self._submit(outgoing(named(name), *args, **kwargs))

    def put(self, task_id: str, payload: dict[str, Any], **options: Unpack[PutOptions]) -> str:
        """`Queue.put`, with `Queue.put`'s options and defaults; `put_at` stamped now when the store records a unit."""
        return self._submit(outgoing(calls.PUT, task_id, payload, **self._stamper().options(options)))

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        """`Queue.put_many`; each item without `put_at` stamped now when the store records a unit."""
        return self._submit(outgoing(calls.PUT_MANY, self._stamper().items(tasks)))

    def _stamper(self) -> PutClock:
        """The client's `PutClock`, asking the store's unit first when it does not know it yet."""
        stamper: PutClock = self._put_clock
        if stamper.should_ask():
            owner: Client = getattr(self, "_client", self)  # a pipeline's puts ask through its client, at once
            stamper.learn(owner.stats())
        return stamper

    def reserve(
        self, worker: str, *, now: int, lease_seconds: int, limit: int = 1, queues: list[str] | None = None
    ) -> list[Lease]:
        return self._submit(
            outgoing(calls.RESERVE, worker, now=now, lease_seconds=lease_seconds, limit=limit, queues=queues)
        )

    def ack(self, lease: Lease, *, now: int) -> None:
        return self._submit(outgoing(calls.ACK, lease, now=now))

    def ack_many(self, leases: Iterable[Lease], *, now: int) -> None:
        """`Queue.ack_many`: many acks in one transaction, all or none. Never retried once sent."""
        return self._submit(outgoing(calls.ACK_MANY, leases, now=now))

    def complete(self, lease: Lease, *, now: int, **options: Unpack[CompleteOptions]) -> None:
        """`Queue.complete`: ack + result + follow-up puts in one transaction. Never retried once sent."""
        return self._submit(outgoing(calls.COMPLETE, lease, now=now, **options))

    def result(self, task_id: str, *, now: int | None = None) -> dict[str, Any] | None:
        """`Queue.result`: a completed task's stored result, or None."""
        return self._submit(outgoing(calls.RESULT, task_id, now=now))

    def release(self, lease: Lease, *, now: int, delay: int = 0, error: Mapping[str, str] | None = None) -> None:
        return self._submit(outgoing(calls.RELEASE, lease, now=now, delay=delay, error=error))

    def fail(self, lease: Lease, *, now: int, error: Mapping[str, str] | None = None) -> None:
        """`Queue.fail`: the leased task is dead at once (a permanent failure). Never retried once sent."""
        return self._submit(outgoing(calls.FAIL, lease, now=now, error=error))

    def give_back(self, lease: Lease, *, now: int) -> None:
        """`Queue.give_back`: an unstarted lease returned, its attempt restored. Never retried once sent."""
        return self._submit(outgoing(calls.GIVE_BACK, lease, now=now))

    def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease:
        """`Queue.extend`: a heartbeat; returns the token with the new deadline. Never retried once sent."""
        return self._submit(outgoing(calls.EXTEND, lease, now=now, lease_seconds=lease_seconds))

    def redrive(self, task_id: str, *, available_at: int, extra_attempts: int = 1) -> None:
        """`Queue.redrive`: a dead task is ready again at `available_at`. Never retried once sent."""
        return self._submit(outgoing(calls.REDRIVE, task_id, available_at=available_at, extra_attempts=extra_attempts))

    def cancel(self, task_id: str, *, error: Mapping[str, str] | None = None, now: int | None = None) -> None:
        """`Queue.cancel`: a ready or leased task becomes dead (with a reason: `error` and `now`). Never retried."""
        return self._submit(outgoing(calls.CANCEL, task_id, error=error, now=now))

    def get(self, task_id: str) -> Task | None:
        return self._submit(outgoing(calls.GET, task_id))

    def tasks(self, status: str | None = None, *, queue: str | None = None) -> list[Task]:
        return self._submit(outgoing(calls.TASKS, status, queue=queue))

    def configure_queue(self, name: str, **settings: Unpack[QueueSettings]) -> None:
        """`Queue.configure_queue`: only the settings given change (None clears a limit)."""
        return self._submit(outgoing(calls.CONFIGURE_QUEUE, name, **settings))

    def queues(self) -> list[dict[str, Any]]:
        """`Queue.queues`: every queue with its settings and counts."""
        return self._submit(outgoing(calls.QUEUES))

    def stats(self) -> dict[str, Any]:
        return self._submit(outgoing(calls.STATS))

    def set_clock(self, units_per_second: int) -> None:
        """`Queue.set_clock`: record the store's clock unit once (the same again writes nothing)."""
        return self._submit(outgoing(calls.CLOCK, units_per_second))

    def metrics(self, *, now: int | None = None) -> dict[str, Any]:
        """`Queue.metrics`: the server's counters since it opened the queue, gauges and histograms."""
        return self._submit(outgoing(calls.METRICS, now=now))

    def page(self, status: str, *, after: str | None = None, limit: int = 100, queue: str | None = None) -> list[Task]:
        """`Queue.page`: up to `limit` tasks with `status` whose ids sort after `after` (a bounded `tasks`)."""
        return self._submit(outgoing(calls.PAGE, status, after=after, limit=limit, queue=queue))

    @property
    def last_seq(self) -> int:
        return int(self.stats()["last_seq"])

    def compact(self) -> None:
        return self._submit(outgoing(calls.COMPACT))

    def wait(self, timeout: float) -> bool:
        """Block until another request commits a transaction (True) or `timeout` seconds pass (False).

        A long poll: commits since this thread's previous call count, so
        `reserve` finding nothing followed by `wait` misses no put made in
        between.
        """
        return self._submit(outgoing(calls.WAIT, timeout))


class Pipeline(Client):
    """`Client`'s calls, collected instead of made; `execute()` sends them all at once and returns their results.

    Every call is checked as it is added (a bad argument raises at once, as
    it would from `Client`); nothing is sent before `execute()`. The server
    answers them in order, each as it would answer it alone (one may fail
    while the others succeed). The methods return None here; `execute()`
    returns the results in the order the calls were made::

        with client.pipeline() as batch:
            for n in range(100):
                batch.put(f"t{n}", {"n": n})
        ids = batch.results  # or: ids = batch.execute() without the with
    """

    def __init__(self, client: Client) -> None:  # Client.__init__ is not called: it runs on the client's connections
        self._client = client
        self._put_clock = client._put_clock
        self._calls: list[OutgoingCall[Any]] = []
        self.results: list[Any] = []

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.results = self.execute()

    def close(self) -> None:
        """A pipeline closes nothing: its client's connections stay."""

    def _submit[T](self, call: OutgoingCall[T]) -> T:
        self._calls.append(call)
        return None  # type: ignore[return-value]  # documented: the result comes from execute()

    def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        """Send every collected call in one round trip; their results in order.

        With `raise_on_error` (the default) the first failure is raised once
        every answer has arrived; without it, a failed call's exception
        stands in its place in the list. The collected calls are cleared.
        """
        calls, self._calls = self._calls, []
        outcomes = self._client._run(calls) if calls else []
        if raise_on_error:
            return [outcome.unwrap() for outcome in outcomes]
        return [outcome.error if outcome.error is not None else outcome.value for outcome in outcomes]
