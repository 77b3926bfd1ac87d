"""The victims of the kill campaign: the warm zygote and the child workloads it forks."""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import threading
import traceback
from typing import Any

from model import render
from walqueue import (
    Lease,
    Queue,
)

from . import TOOLS_DIR, lifecycle
from .harness import DOCUMENTED_ERRORS
from .workload import Op, Workload, outcome, perform, seeded_error, text_digest

KILL_COMPACT_BYTES = 3000
KILL_CHILD_STEPS = 400
KILLS_PER_UNIT = 40
KILL_MAX_DELAY = 0.05
STARTUP_KILL_PROBABILITY = 0.1
CHILD_TIMEOUT = 60.0


#: The zygote's entry point: import this package (its bytecode is cached, a script's is not) and
#: run `kill_zygote`; the ``--kill-zygote`` argument only names the process in `ps`.
CHILD_BOOTSTRAP = (
    f"import sys; sys.path.insert(0, {str(TOOLS_DIR)!r}); "
    "from torture.kill_child import kill_zygote; sys.exit(kill_zygote())"
)


def kill_workload(seed: int, unit: int, epoch: int) -> lifecycle.Opening:
    """The child's workload for one life (epoch) of one store (unit); the parent rebuilds the same.

    The first life of the first store opens with the forced lifecycle (lifecycle.py), which the
    parent lets it finish before the kill (`forced_steps`).
    """
    workload = Workload(f"kill:{seed}:{unit}:{epoch}", prefix=f"e{epoch}.", now=epoch * 1000)
    return lifecycle.first_unit(workload, unit + epoch)


def forced_steps(unit: int, epoch: int) -> int:
    """How many calls of that life are the forced lifecycle's (`kill_workload`)."""
    return len(lifecycle.STEPS) if unit + epoch == 0 else 0


def kill_child(directory: str, seed: int, unit: int, epoch: int, compact_bytes: int | None = KILL_COMPACT_BYTES) -> int:
    """The victim: open the queue, then run the workload, reporting each call before and after it.

    Lines go to stdout with one `os.write` each (shorter than PIPE_BUF, so
    never torn); `done` carries a digest of the exact answer.
    """
    out = sys.stdout.fileno()
    queue = Queue(directory, sync=True, compact_bytes=compact_bytes)
    os.write(out, b"ready\n")
    workload = kill_workload(seed, unit, epoch)
    for index in range(KILL_CHILD_STEPS):
        op = workload.next_op(queue)
        os.write(out, f"begin {index} {op.describe()}\n".encode())
        answer = outcome(op, queue)
        os.write(out, f"done {index} {text_digest(answer)}\n".encode())
    queue.close()
    return 0


#: Threads per life, cycling over the lives of a store: every other life has one (the begin/done protocol,
#: which the bounded run counts on), the others 4 and 16 (group commit).
KILL_THREADS = (1, 4, 1, 16)
KILL_THREAD_STEPS = 60
#: compact_bytes of a threaded life: small ones make the background snapshot run while threads write.
KILL_THREADED_COMPACT_BYTES = (None, 1500, 4000)


def kill_life_options(seed: int, unit: int, epoch: int) -> tuple[int, int | None]:
    """(threads, compact_bytes) of one life; the parent and the child agree on them through the request."""
    threads = KILL_THREADS[epoch % len(KILL_THREADS)]
    if threads == 1:
        return 1, KILL_COMPACT_BYTES
    return threads, random.Random(f"kill-life:{seed}:{unit}:{epoch}").choice(KILL_THREADED_COMPACT_BYTES)


def answer_of(op: Op, target: Any) -> tuple[str, Any]:
    """`outcome` and the value itself (None for a documented error)."""
    try:
        value = perform(op, target)
    except DOCUMENTED_ERRORS as exc:
        return "error " + type(exc).__name__, None
    return "ok " + render(value), value


class ThreadOps:
    """One thread's calls in a threaded kill life: chosen from its seed and its own answers only.

    Another thread's calls change what `reserve`, `tasks()` and `get` see, so
    nothing here reads the queue: a thread puts its own tasks, reserves as its
    own worker, acks, releases, fails or extends only leases it was given, and
    redrives or cancels only its own tasks (whoever holds them). Half of its
    releases and cancels, and most of its fails, record a seeded error. The parent
    builds the same stream by feeding it the model's answers.
    """

    def __init__(self, seed: int, unit: int, epoch: int, thread: str) -> None:
        self.rng = random.Random(f"kill-threads:{seed}:{unit}:{epoch}:{thread}")
        self.thread = thread
        self.prefix = f"e{epoch}.{thread}."
        self.now = epoch * 1000
        self.next_id = 0
        self.specs: list[dict[str, Any]] = []
        self.held: list[Lease] = []

    def _spec(self) -> dict[str, Any]:
        self.next_id += 1
        task_id = f"{self.prefix}{self.next_id:03d}"
        spec: dict[str, Any] = {"task_id": task_id, "payload": {"n": self.next_id, "by": self.thread}}
        spec["max_attempts"] = self.rng.choice([1, 2, 3])
        if self.rng.random() < 0.3:
            spec["key"] = f"k-{task_id}"
        self.specs.append(spec)
        return spec

    def next_op(self) -> Op:
        rng = self.rng
        self.now += rng.choice([0, 1, 2])
        kind = rng.choices(
            ["put", "put_many", "retry", "reserve", "ack", "release", "get", "tasks", "extend", "redrive", "cancel"]
            + ["fail", "give_back"],
            [5, 2, 1, 4, 3, 2, 1, 1, 2, 1, 1, 1, 1],
        )[0]
        if kind == "retry" and self.specs:
            return Op("put", {"spec": dict(rng.choice(self.specs))})
        if kind == "put_many":
            return Op("put_many", {"items": [self._spec() for _ in range(rng.randrange(1, 4))]})
        if kind == "reserve":
            limit = rng.choice([1, 2, 3])
            return Op(
                "reserve",
                {"worker": self.thread, "now": self.now, "lease_seconds": rng.choice([2, 5, 50]), "limit": limit},
            )
        if kind in ("ack", "release", "fail", "give_back") and self.held:
            lease = self.held.pop(rng.randrange(len(self.held)))
            if kind in ("ack", "give_back"):
                return Op(kind, {"lease": lease, "now": self.now})
            if kind == "fail":
                error = seeded_error(rng) if rng.random() < 0.8 else None
                return Op("fail", {"lease": lease, "now": self.now, "error": error})
            error = seeded_error(rng) if rng.random() < 0.5 else None
            return Op("release", {"lease": lease, "now": self.now, "delay": rng.choice([0, 1]), "error": error})
        if kind == "extend" and self.held:
            # A heartbeat: the lease stays held (its old token stays valid), and its answer replaces it.
            lease = self.held[rng.randrange(len(self.held))]
            return Op("extend", {"lease": lease, "now": self.now, "lease_seconds": rng.choice([2, 5, 50])})
        if kind in ("redrive", "cancel") and self.specs:
            # One of its own tasks, whatever its status now: another thread's reserve may have leased it,
            # so a cancel may hit a lease held elsewhere, and either call may be WrongStatus.
            task_id = rng.choice(self.specs)["task_id"]
            if kind == "cancel":
                error = seeded_error(rng) if rng.random() < 0.5 else None
                return Op("cancel", {"task_id": task_id, "error": error, "now": None if error is None else self.now})
            return Op("redrive", {"task_id": task_id, "available_at": self.now, "extra_attempts": rng.choice([1, 2])})
        if kind == "get" and self.specs:
            return Op("get", {"task_id": rng.choice(self.specs)["task_id"]})
        if kind == "tasks":
            return Op("tasks", {"status": rng.choice(["leased", "dead", "completed"])})
        return Op("put", {"spec": self._spec()})

    def feed(self, op: Op, value: Any) -> None:
        """The answer to the call `next_op` gave last (the queue's in the child, the model's in the parent)."""
        if op.kind == "reserve" and value:
            self.held.extend(value)
        elif op.kind == "extend" and value is not None:
            self.held[self.held.index(op.args["lease"])] = value


def _forward_wal_frames(out: int, calls: dict[str, int]) -> None:
    """In a threaded victim: after each frame the engine writes to a WAL segment, report ``frame SEQ THREAD CALL``.

    The frame is written under the queue's lock, so the lines come in log
    order, each naming the thread and the index of its call that wrote it
    (`calls`: each thread's call under way). The index is what makes the
    replay exact: an empty reserve writes a reap or nothing depending on
    when it ran, and its answer alone cannot tell. A frame written just
    before the kill may lack its line (the parent then tries the threads
    whose call was in flight). `os.write` is wrapped, the engine untouched.
    """
    original = os.write
    pending: dict[int, bytearray] = {}

    def write(fd: int, data: Any) -> int:
        count = original(fd, data)
        if fd == out:
            return count
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return count
        if not name.startswith("wal-"):
            return count
        buffer = pending.setdefault(fd, bytearray())
        buffer += bytes(memoryview(data)[:count])
        while len(buffer) >= 4:
            (length,) = struct.unpack(">I", buffer[:4])
            if len(buffer) < 4 + length + 32:
                break
            seq = json.loads(bytes(buffer[4 : 4 + length]))["seq"]
            del buffer[: 4 + length + 32]
            thread = threading.current_thread().name
            original(out, f"frame {seq} {thread} {calls.get(thread, -1)}\n".encode())
        return count

    os.write = write


def kill_threads_child(
    directory: str, seed: int, unit: int, epoch: int, threads: int, compact_bytes: int | None
) -> int:
    """The threaded victim: `threads` threads share one Queue (group commit); each reports its acknowledged calls."""
    out = sys.stdout.fileno()
    write = os.write
    calls: dict[str, int] = {}
    _forward_wal_frames(out, calls)
    queue = Queue(directory, sync=True, compact_bytes=compact_bytes)
    write(out, b"ready\n")
    failures: list[str] = []

    def run(name: str) -> None:
        try:
            ops = ThreadOps(seed, unit, epoch, name)
            for index in range(KILL_THREAD_STEPS):
                op = ops.next_op()
                calls[name] = index
                text, value = answer_of(op, queue)
                write(out, f"done {name} {index} {text_digest(text)}\n".encode())
                ops.feed(op, value)
        except BaseException:
            failures.append(traceback.format_exc())

    workers = [threading.Thread(target=run, args=(f"T{n}",), name=f"T{n}") for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    queue.close()
    if failures:
        sys.stderr.write(failures[0])
        return 1
    return 0


def kill_zygote() -> int:
    """A warm process that forks one victim per request line and reports its pid and its end.

    Starting an interpreter and importing walqueue costs far more than a
    life worth killing, so the process started with `sys.executable` does it
    once and forks each victim from there: a real process, with its own
    descriptors and lock, that opens and recovers the store itself and dies
    by SIGKILL. Lines on stdout: ``child PID`` after each fork (the victim's
    own lines may come before it), ``exit PID STATUS`` once it is dead
    (after every line the victim wrote, since the zygote waits for it first).
    """
    out = sys.stdout.fileno()
    while request := sys.stdin.buffer.readline():
        directory, seed, unit, epoch, threads, compact = request.decode().split()
        compact_bytes = None if compact == "none" else int(compact)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if int(threads) == 1:
                    code = kill_child(directory, int(seed), int(unit), int(epoch), compact_bytes)
                else:
                    code = kill_threads_child(directory, int(seed), int(unit), int(epoch), int(threads), compact_bytes)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.write(out, f"child {pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        os.write(out, f"exit {pid} {os.waitstatus_to_exitcode(status)}\n".encode())
    return 0
