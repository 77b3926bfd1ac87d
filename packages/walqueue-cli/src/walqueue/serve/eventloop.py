"""The server's one event loop: it owns the `Queue`, every connection, and the order of their answers.

One thread does everything, in turns (the shape of Redis's event loop and
of PostgreSQL's group commit):

1. Wait (`selectors`: epoll where there is one, so descriptor numbers past
   1024 are fine) for the listener, the connections and the stop and
   signal pipes; read once from every ready connection.
2. Execute every complete request, connection by connection in arrival
   order, at most `turn_cap` per connection per turn (one pipelining client
   cannot starve the others), all inside one ``queue.batch()``: no call
   waits for durability. Then read the connections again without waiting
   (at most `_GATHERS` times) and execute what arrived meanwhile in the
   same batch: more requests share the fsync.
3. Leave the batch: ONE fsync covers every transaction of the turn. Only
   then are the answers put in the connections' output buffers, so no
   answer leaves before the fsync that covers its request, reads included.
   Should that fsync fail, every answer of the turn becomes ``Fatal``.
4. Answer the parked ``wait`` requests that a commit (now durable) or their
   deadline released, and send what the sockets take without blocking.

Bounds: a line is at most the line bound (`LineReader`); a connection's
unexecuted requests and unread answers are bounded (`Conversation`), and
past them the loop stops reading that connection, so the kernel pushes
back on its sender; a connection whose answers make no progress for
`write_timeout` seconds is dropped (time without progress, however large
the answer). A parked ``wait`` costs no thread: it is a deadline here.

Request seconds: each executed request is timed by one `perf_counter` pair
around its execution (not the turn's fsync, which the fsync histogram
times; not a parked ``wait``) into `RequestSeconds` by op, which the loop
attaches to the queue (`Queue.attach_request_seconds`): every reading of
the queue's metrics (a ``metrics`` request, the dashboard) then carries it
as ``request_seconds``. The loop names no op: which calls park is each
row's `blocks` in the call table.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Final

from walqueue import Queue, QueueClosed
from walqueue.engine.metrics import RequestSeconds
from walqueue.protocol.calltable import CALLS
from walqueue.protocol.lines import OVERLONG, RequestLine
from walqueue.protocol.requests import (
    NO_ID,
    BadRequest,
    bad_request_answer,
    encode_answer,
    error_answer,
    execute,
    is_blank,
    overlong_answer,
    parse_request,
    success_answer,
)
from walqueue.serve.conversation import Conversation
from walqueue.serve.listener import peer_of

__all__ = ["DEFAULT_TURN_CAP", "Limits", "Loop"]

log = logging.getLogger("walqueue.serve")

#: Requests of one connection executed in one turn, at most.
DEFAULT_TURN_CAP: Final = 64
#: Connections accepted in one turn, at most (the others wait in the backlog).
_ACCEPTS_PER_TURN: Final = 16
#: How many times a turn reads the connections again before its fsync (requests that arrived meanwhile join it).
_GATHERS: Final = 2
#: A failed accept (EMFILE: no descriptor left) pauses accepting this long, instead of spinning.
_ACCEPT_PAUSE: Final = 0.1
#: Bytes asked of one recv. Below glibc's mmap threshold (128 KiB): a larger buffer is
#: mmap'd, mremap'd and munmap'd for every read, about 20 us of system CPU per request.
_RECV_BYTES: Final = 2**16
_READ: Final = selectors.EVENT_READ
_WRITE: Final = selectors.EVENT_WRITE
_LISTENER: Final = "listener"
#: Whether each call may commit a transaction (else the queue's last sequence cannot have moved).
_WRITES: Final = {name: call.writes for name, call in CALLS.items()}
#: The calls that block until another client commits (`Call.blocks`): parked here, not executed.
_PARKS: Final = {name: call.blocks for name, call in CALLS.items()}
_PIPE: Final = "pipe"


@dataclass(frozen=True, slots=True)
class Limits:
    """What one connection may cost the server."""

    max_clients: int
    write_timeout: float
    line_limit: int
    turn_cap: int = DEFAULT_TURN_CAP


@dataclass(slots=True, eq=False)
class _Client:
    sock: socket.socket
    talk: Conversation
    who: str
    mask: int = 0
    #: When the answers waiting in the output buffer last moved (or started waiting).
    progress_at: float = field(default_factory=time.monotonic)


class Loop:
    """The turns of the event loop for one queue and one listener; `run` returns when `stopping()` says so."""

    def __init__(
        self,
        queue: Queue,
        listener: socket.socket,
        pipes: list[int],
        limits: Limits,
        stopping: Callable[[], bool],
        request_seconds: RequestSeconds | None = None,
    ) -> None:
        self._queue = queue
        #: Each executed request's seconds by op (a parked `wait` is not timed: its time is the client's).
        self._request_seconds = request_seconds if request_seconds is not None else RequestSeconds(tuple(CALLS))
        queue.attach_request_seconds(self._request_seconds)
        self._listener = listener
        self._limits = limits
        self._stopping = stopping
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, _READ, _LISTENER)
        for pipe in pipes:
            self._selector.register(pipe, _READ, _PIPE)
        self._clients: dict[int, _Client] = {}
        #: Connections that may have a request to run (in the order they became so): checked each turn.
        self._candidates: dict[_Client, None] = {}
        #: Connections whose answers are not all sent: watched for the write timeout.
        self._stalled: set[_Client] = set()
        self._parked: set[_Client] = set()
        self._accept_paused_until: float | None = None
        self._numbers = 0
        #: The queue's last sequence, as of the last request that may have written (or the last look
        #: at parked waits: the dashboard's actions commit from other threads).
        self._seq = queue.last_seq
        #: Set when a request's answer was `Fatal`: the queue is poisoned and the server must stop.
        self.fatal = False

    @property
    def client_count(self) -> int:
        """The connections open now (a server told to stop when idle stops when this is 0)."""
        return len(self._clients)

    # -- the turn ------------------------------------------------------------------

    def run(self) -> None:
        """Turn until `stopping()`; then answer parked waits, flush what can be flushed, close every connection."""
        select = self._selector.select
        try:
            while not self._stopping() and not self.fatal:
                for key, mask in select(self._timeout()):
                    self._dispatch(key, mask)
                if self._stopping():
                    break
                self._execute_turn()
                self._release_parked()
                self._expire_writers()
                self._resume_accepting()
        finally:
            self._shutdown()

    def _timeout(self) -> float | None:
        """How long the next select may sleep: not at all while requests are runnable, else until the next deadline."""
        if self._candidates:
            return 0.0
        deadlines = [client.talk.parked_until or 0.0 for client in self._parked]
        write_timeout = self._limits.write_timeout
        deadlines += [client.progress_at + write_timeout for client in self._stalled]
        if self._accept_paused_until is not None:
            deadlines.append(self._accept_paused_until)
        deadline = min(deadlines, default=None)
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _dispatch(self, key: selectors.SelectorKey, mask: int) -> None:
        data = key.data
        if data is _LISTENER:
            self._accept()
        elif data is _PIPE:
            _drain(key.fd)
        else:
            client: _Client = data
            if mask & _READ:
                self._read(client)
            if mask & _WRITE and client.sock.fileno() >= 0:
                self._flush(client)

    def _execute_turn(self) -> None:
        """Every runnable request of this turn in one batch, then the answers (only after its fsync).

        Before the batch ends (and its fsync runs), the connections are
        read again, without waiting, up to `_GATHERS` times: requests that
        arrived while this turn executed join its fsync instead of waiting
        for the next one (PostgreSQL's ``commit_delay``, with no delay).
        """
        runnable = [client for client in self._candidates if client.talk.runnable()]
        self._candidates.clear()
        if not runnable:
            return
        staged: list[tuple[_Client, dict[str, Any]]] = []
        try:
            with self._queue.batch():
                self._run_requests(runnable, staged)
                for _ in range(_GATHERS):
                    more = self._gather() if not self.fatal else []
                    if not more:
                        break
                    self._run_requests(more, staged)
                    known = set(runnable)
                    runnable += [client for client in more if client not in known]
        except Exception as error:  # the fsync that covered the turn failed: no answer may claim it happened
            log.error("the fsync of a batch failed (%s: %s); every answer of it is Fatal", type(error).__name__, error)
            message = f"{type(error).__name__}: {error}"
            staged = [(client, error_answer("Fatal", message, answer.get("id", NO_ID))) for client, answer in staged]
            self.fatal = True
        for client, answer in staged:
            self._deliver(client, answer)
        for client in runnable:
            self._flush(client)
            if client.sock.fileno() >= 0 and client.talk.runnable():  # its cap was reached: the next turn
                self._candidates[client] = None
        if self.fatal:
            log.error("the queue is poisoned; stopping")

    def _run_requests(self, clients: list[_Client], staged: list[tuple[_Client, dict[str, Any]]]) -> None:
        """Execute up to `turn_cap` requests of each client, in order; their answers go to `staged`."""
        cap = self._limits.turn_cap
        for client in clients:
            talk = client.talk
            for _ in range(cap):
                line = talk.next_line()
                if line is None:
                    break
                answer = self._answer(client, line)
                if answer is not None:
                    staged.append((client, answer))
                if self.fatal:
                    return

    def _gather(self) -> list[_Client]:
        """The connections with a runnable request after one more read of those ready now (no waiting).

        Only reads: accepting, the stop and signal pipes and sending wait
        for the next turn's select (the selector is level-triggered).
        """
        for key, mask in self._selector.select(0):
            data = key.data
            if mask & _READ and isinstance(data, _Client):
                self._read(data)
        more = [client for client in self._candidates if client.talk.runnable()]
        self._candidates.clear()
        return more

    def _answer(self, client: _Client, line: RequestLine) -> dict[str, Any] | None:
        """The answer to one line (None: a blank line, or a `wait` that parked)."""
        if line is OVERLONG:
            return overlong_answer(self._limits.line_limit)
        if is_blank(line):
            return None
        parsed = parse_request(line)
        if isinstance(parsed, BadRequest):
            return bad_request_answer(parsed)
        if _PARKS[parsed.op]:
            return self._wait(client, CALLS[parsed.op].blocks_for(parsed.arguments), parsed.request_id)
        started = perf_counter()
        reply = execute(parsed, self._queue)
        self._request_seconds.observe(parsed.op, perf_counter() - started)
        if reply.fatal:
            self.fatal = True
            return reply.answer
        if _WRITES[parsed.op]:
            self._seq = self._queue.last_seq
        # `_seq` is at most the state this request looked at (other threads of the dashboard may have
        # committed since): a later wait may wake for a commit already seen, never miss one.
        client.talk.seen = self._seq
        return reply.answer

    def _wait(self, client: _Client, timeout: float, request_id: Any) -> dict[str, Any] | None:
        """Answer at once when a commit came after what this connection last saw; else park until one does."""
        talk = client.talk
        last = self._seq
        if last > talk.seen:
            talk.seen = last
            return success_answer({"committed": True}, request_id)
        if timeout <= 0:
            return success_answer({"committed": False}, request_id)
        talk.park(time.monotonic() + timeout, request_id)
        self._parked.add(client)
        return None

    def _release_parked(self) -> None:
        """Answer the parked waits a (durable) commit or their deadline released. Outside any batch."""
        if not self._parked:
            return
        # Read again, outside any batch (so it answers once durable): another thread of
        # this process (the dashboard's actions, which then poke the loop) may have committed.
        try:
            self._seq = max(self._seq, self._queue.last_seq)
        except QueueClosed:
            pass  # poisoned meanwhile: the waits are answered with what this loop saw
        last = self._seq
        now = time.monotonic()
        for client in list(self._parked):
            talk = client.talk
            assert talk.parked_until is not None
            committed = last > talk.seen
            if not committed and now < talk.parked_until:
                continue
            if committed:
                talk.seen = last
            self._parked.discard(client)
            self._deliver(client, success_answer({"committed": committed}, talk.unpark()))
            self._candidates[client] = None  # requests it pipelined behind the wait
            self._flush(client)

    # -- connections -------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_TURN):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:  # e.g. EMFILE: keep serving the others, try again shortly
                log.warning("accept failed: %s; accepting again in %.1f s", error, _ACCEPT_PAUSE)
                self._selector.unregister(self._listener)
                self._accept_paused_until = time.monotonic() + _ACCEPT_PAUSE
                return
            self._admit(sock)

    def _resume_accepting(self) -> None:
        if self._accept_paused_until is not None and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = None
            self._selector.register(self._listener, _READ, _LISTENER)

    def _admit(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        peer = peer_of(sock)
        who = str(peer) if peer else "peer unknown"
        limit = self._limits.max_clients
        if len(self._clients) >= limit:
            log.warning("refusing a client (%s): %d clients already", who, limit)
            answer = error_answer("TooManyClients", f"the server has {limit} clients already")
            try:
                sock.send(encode_answer(answer))  # small: the empty socket buffer takes it whole
            except OSError:
                pass
            _close_quietly(sock)
            return
        self._numbers += 1
        talk = Conversation(self._numbers, self._seq, line_limit=self._limits.line_limit)
        client = _Client(sock, talk, who)
        self._clients[sock.fileno()] = client
        self._update_interest(client)
        log.info("client %d connected (%s)", talk.number, who)

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset: it went away; what it did not see answered never started
            self._close(client)
            return
        client.talk.received(data)
        if not data and client.talk.parked_until is not None and _peer_gone(client.sock):
            self._close(client)  # closed, not half-closed: nobody will read the wait's answer
            return
        if client.talk.runnable():
            self._candidates[client] = None
        self._update_interest(client)

    def _deliver(self, client: _Client, answer: dict[str, Any]) -> None:
        """Queue an answer; `_flush` follows in the same turn (and starts the write clock if it cannot send all)."""
        client.talk.answer(encode_answer(answer))

    def _flush(self, client: _Client) -> None:
        """Send what the socket takes now; never blocks. Closes a connection that is done or gone."""
        talk = client.talk
        unsent = talk.unsent
        if unsent:
            try:
                sent = client.sock.send(talk.to_send())
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:  # it went away; its requests were completed
                self._close(client)
                return
            if sent:
                talk.sent(sent)
                unsent -= sent
                if talk.runnable():  # its answers fell below the bound: its requests may run again
                    self._candidates[client] = None
            if unsent and (sent or client not in self._stalled):  # moved, or starts to wait: the clock starts
                client.progress_at = time.monotonic()
                self._stalled.add(client)
        if not unsent and self._stalled:
            self._stalled.discard(client)
        if talk.finished():
            self._close(client)
        else:
            self._update_interest(client)

    def _expire_writers(self) -> None:
        """Drop each connection whose answers made no progress for `write_timeout` seconds."""
        timeout = self._limits.write_timeout
        now = time.monotonic()
        for client in [c for c in self._stalled if now - c.progress_at >= timeout]:
            log.warning(
                "client %d read none of its answers for %.0f s (%d bytes unread); disconnecting it",
                client.talk.number,
                timeout,
                client.talk.unsent,
            )
            self._close(client)

    def _update_interest(self, client: _Client) -> None:
        talk = client.talk
        mask = (_READ if talk.wants_input() else 0) | (_WRITE if talk.unsent else 0)
        if mask == client.mask:
            return
        if client.mask == 0:
            self._selector.register(client.sock, mask, client)
        elif mask == 0:
            self._selector.unregister(client.sock)
        else:
            self._selector.modify(client.sock, mask, client)
        client.mask = mask
        if talk.finished():
            self._close(client)

    def _close(self, client: _Client) -> None:
        fileno = client.sock.fileno()
        if fileno < 0:
            return
        if client.mask:
            self._selector.unregister(client.sock)
            client.mask = 0
        self._clients.pop(fileno, None)
        self._parked.discard(client)
        self._stalled.discard(client)
        self._candidates.pop(client, None)
        _close_quietly(client.sock)
        log.info("client %d disconnected after %d requests", client.talk.number, client.talk.answered)

    # -- stopping ------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Answer parked waits (false), drop requests not started, flush for a bounded time, close everything."""
        if self._accept_paused_until is None:
            self._selector.unregister(self._listener)
        for client in list(self._parked):
            self._parked.discard(client)
            self._deliver(client, success_answer({"committed": False}, client.talk.unpark()))
        for client in list(self._clients.values()):
            client.talk.received(b"")  # read nothing more: the connection closes once its answers are out
            client.talk.drop_pending()
            self._flush(client)
        deadline = time.monotonic() + min(self._limits.write_timeout, _STOP_FLUSH_SECONDS)
        while self._clients and (left := deadline - time.monotonic()) > 0:
            for key, _ in self._selector.select(left):
                if key.data is _PIPE:
                    _drain(key.fd)
                elif isinstance(key.data, _Client):
                    self._flush(key.data)
        for client in list(self._clients.values()):
            self._close(client)
        self._selector.close()


#: How long a stopping server keeps sending answers already made to clients that read them slowly.
_STOP_FLUSH_SECONDS: Final = 10.0


def _drain(fd: int) -> None:
    """Read a non-blocking pipe until it is empty (or closed)."""
    try:
        while os.read(fd, 512):
            pass
    except (BlockingIOError, InterruptedError):
        pass
    except OSError:
        pass


def _peer_gone(sock: socket.socket) -> bool:
    """Whether the peer closed its socket altogether (a zero-byte send fails), not only its writing half."""
    try:
        sock.send(b"")
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    return False


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
