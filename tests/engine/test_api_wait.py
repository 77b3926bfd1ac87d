"""`Queue.wait(timeout)`: block until another thread commits, or the timeout passes.

The rule that makes it usable by a worker: a commit counts if it came after
the state this thread's previous call saw, so ``reserve`` finding nothing,
then ``wait``, misses nothing committed in between. Every test bounds its
own waits; pytest-timeout bounds the rest.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from walqueue import Queue, QueueClosed, ReentrantCall

pytestmark = pytest.mark.timeout(60)


def in_thread(work: Any, *, delay: float = 0.0) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        work()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def alarm(handler: Callable[[], None]) -> Iterator[None]:
    """`handler` runs as a SIGALRM handler 50 ms into the block (in this thread, as any signal handler)."""
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: handler())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_thread_that_never_called_waits_for_a_commit_from_now_on(q: Queue) -> None:
    in_thread(lambda: q.put("t", {})).join(10)
    assert q.wait(0.05) is False  # nothing to have missed: it never looked


def test_wait_without_a_commit_times_out_with_false(q: Queue) -> None:
    q.put("t", {})
    assert q.wait(0.05) is False
    assert q.wait(0) is False


def test_wait_returns_true_once_another_thread_commits(q: Queue) -> None:
    q.stats()
    thread = in_thread(lambda: q.put("t", {}), delay=0.05)
    assert q.wait(30) is True
    thread.join(10)
    assert q.get("t") is not None


def test_a_commit_between_an_empty_reserve_and_the_wait_is_not_missed(q: Queue) -> None:
    assert q.reserve("w", now=0, lease_seconds=1) == []
    in_thread(lambda: q.put("t", {})).join(10)
    started = time.monotonic()
    assert q.wait(30) is True
    assert time.monotonic() - started < 10  # it did not sit out the timeout
    assert q.reserve("w", now=0, lease_seconds=1) != []


def test_a_thread_that_saw_the_commit_waits_for_the_next_one(q: Queue) -> None:
    q.stats()
    in_thread(lambda: q.put("t", {})).join(10)
    assert q.wait(0) is True  # this thread has not looked since
    q.get("t")  # now it has
    assert q.wait(0.05) is False


def test_a_read_only_call_of_another_thread_wakes_nobody(q: Queue) -> None:
    q.put("t", {})
    q.stats()
    thread = in_thread(lambda: q.stats(), delay=0.02)
    assert q.wait(0.2) is False
    thread.join(10)


def test_close_from_another_thread_ends_the_wait_with_queue_closed(qdir: Path) -> None:
    q = Queue(qdir, sync=False)
    q.stats()
    closing = in_thread(q.close, delay=0.05)
    with pytest.raises(QueueClosed):
        q.wait(30)
    closing.join(10)
    Queue(qdir, sync=False).close()  # the directory was released once close() returned


def test_close_from_a_signal_handler_ends_the_wait_and_releases_the_directory(qdir: Path) -> None:
    q = Queue(qdir, sync=False)
    q.stats()
    with alarm(lambda: q.close()), pytest.raises(QueueClosed):
        q.wait(30)
    Queue(qdir, sync=False).close()


def test_a_call_from_a_signal_handler_that_interrupted_a_wait_is_reentrant(qdir: Path) -> None:
    q = Queue(qdir, sync=False)
    q.stats()
    seen: list[BaseException] = []

    def handler() -> None:
        try:
            q.stats()
        except ReentrantCall as error:
            seen.append(error)
        q.close()

    with alarm(handler), pytest.raises(QueueClosed):
        q.wait(30)
    assert len(seen) == 1


def test_calls_of_other_threads_and_after_a_wait_are_served(q: Queue) -> None:
    """Only the waiting thread's own calls are refused: another thread's call, or its own once the wait ended, runs."""
    done = threading.Event()

    def wait() -> None:
        q.wait(0.3)
        done.set()

    waiter = in_thread(wait)
    time.sleep(0.05)
    q.put("t", {})  # while the other thread waits (this commit ends its wait)
    waiter.join(10)
    assert done.is_set()
    assert q.wait(0.01) is False
    assert q.get("t") is not None


def test_wait_on_a_closed_queue_is_queue_closed(qdir: Path) -> None:
    q = Queue(qdir, sync=False)
    q.close()
    with pytest.raises(QueueClosed):
        q.wait(0)


@pytest.mark.parametrize("timeout", [-1, -0.5, math.nan, math.inf])
def test_wait_with_a_bad_number_is_value_error(q: Queue, timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        q.wait(timeout)


@pytest.mark.parametrize("timeout", ["1", None, True, [1]])
def test_wait_with_something_that_is_no_number_is_type_error(q: Queue, timeout: Any) -> None:
    with pytest.raises(TypeError, match="timeout"):
        q.wait(timeout)


def test_wait_from_inside_a_call_is_reentrant(qdir: Path) -> None:
    seen: list[BaseException] = []
    holder: list[Queue] = []

    def hook(phase: str) -> None:
        if phase == "wal.append.written" and holder and not seen:
            try:
                holder[0].wait(0)
            except ReentrantCall as error:
                seen.append(error)

    q = Queue(qdir, sync=False, hook=hook)
    holder.append(q)
    q.put("t", {})
    q.close()
    assert len(seen) == 1


def test_a_durable_commit_wakes_a_waiter(qdir: Path) -> None:
    with Queue(qdir) as q:  # sync=True: group commit, the wake comes once the fsync covered it
        q.stats()
        thread = in_thread(lambda: q.put("t", {}), delay=0.05)
        assert q.wait(30) is True
        thread.join(10)
