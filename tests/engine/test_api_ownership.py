"""CONTRACT §2 ownership: one `Queue` per directory, and when ownership ends.

`DirectoryLocked` in this process and from another one; the lock is free
again after `close()`, after the object is garbage-collected, and at once
after a crash injected by a hook (even while the exception's traceback still
references the dead object). `close()` is idempotent and never raises; every
other call on a closed queue, and reading `last_seq`, raises `QueueClosed`.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from model import view
from walqueue import DirectoryLocked, InjectedCrash, Lease, Queue, QueueClosed, WalQueueError


@pytest.fixture
def child_env(src_pythonpath: str) -> dict[str, str]:
    """The environment of a child Python that imports the same walqueue as this process.

    `src_pythonpath` (tests/conftest.py) holds the three src directories, or
    nothing when the suite tests installed wheels (`-o pythonpath=`).
    """
    env = dict(os.environ)
    if src_pythonpath:
        inherited = env.get("PYTHONPATH")
        env["PYTHONPATH"] = src_pythonpath + (os.pathsep + inherited if inherited else "")
    return env


# ---------------------------------------------------------------------------
# opening


def test_opening_creates_the_directory_and_its_parents(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c"
    with Queue(target, sync=False) as q:
        assert target.is_dir()
        q.put("t", {})
    with Queue(str(target), sync=False) as q:  # a str works as well as a path-like
        assert q.get("t") is not None


def test_opening_writes_the_lock_file(qdir: Path) -> None:
    with Queue(qdir, sync=False):
        assert (qdir / "LOCK").exists()


# ---------------------------------------------------------------------------
# DirectoryLocked


def test_second_queue_in_the_same_process_is_directory_locked(qdir: Path) -> None:
    with Queue(qdir, sync=False) as first:
        first.put("t", {})
        with pytest.raises(DirectoryLocked):
            Queue(qdir, sync=False)
        with pytest.raises(DirectoryLocked):
            Queue(str(qdir) + os.sep, sync=True)
        # the refused open changed nothing for the owner
        assert first.get("t") is not None
        first.put("u", {})
    assert issubclass(DirectoryLocked, WalQueueError)


def test_directory_locked_through_another_path_to_the_same_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    link = tmp_path / "link"
    with Queue(real, sync=False):
        link.symlink_to(real, target_is_directory=True)
        with pytest.raises(DirectoryLocked):
            Queue(link, sync=False)


HOLDER = textwrap.dedent(
    """
    import sys
    from walqueue import Queue
    q = Queue(sys.argv[1], sync=False)
    q.put("from-child", {"n": 1})
    print("locked", flush=True)
    sys.stdin.readline()
    q.close()
    print("closed", flush=True)
    """
)

PROBE = textwrap.dedent(
    """
    import sys
    from walqueue import DirectoryLocked, Queue
    try:
        Queue(sys.argv[1], sync=False).close()
    except DirectoryLocked:
        print("DirectoryLocked")
    else:
        print("opened")
    """
)


def test_queue_held_by_another_process_is_directory_locked(qdir: Path, child_env: dict[str, str]) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(qdir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(DirectoryLocked):
            Queue(qdir, sync=False)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with Queue(qdir, sync=False) as q:
        assert q.get("from-child") is not None


def test_another_process_is_directory_locked_while_this_one_owns_it(qdir: Path, child_env: dict[str, str]) -> None:
    def probe() -> str:
        result = subprocess.run(
            [sys.executable, "-c", PROBE, str(qdir)], capture_output=True, text=True, env=child_env, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    q = Queue(qdir, sync=False)
    assert probe() == "DirectoryLocked"
    q.close()
    assert probe() == "opened"


def test_lock_of_a_killed_process_is_free(qdir: Path, child_env: dict[str, str]) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(qdir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        child.kill()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with Queue(qdir, sync=False) as q:
        assert q.get("from-child") is not None


# ---------------------------------------------------------------------------
# when ownership ends


def test_reopen_after_close(qdir: Path) -> None:
    q = Queue(qdir, sync=False)
    q.put("t", {})
    before = view(q)
    q.close()
    with Queue(qdir, sync=False) as again:
        assert view(again) == before


def test_reopen_after_the_queue_is_garbage_collected(qdir: Path) -> None:
    q = Queue(qdir, sync=False)
    q.put("t", {})
    del q
    gc.collect()
    with Queue(qdir, sync=False) as again:
        assert again.get("t") is not None


def test_reopen_after_a_queue_in_a_reference_cycle_is_collected(qdir: Path) -> None:
    q = Queue(qdir, sync=False)
    q.put("t", {})
    holder: dict[str, Any] = {"queue": q}
    holder["self"] = holder
    del q, holder
    gc.collect()
    with Queue(qdir, sync=False) as again:
        assert again.get("t") is not None


def _crash_on_put(qdir: Path) -> tuple[Queue, InjectedCrash]:
    def hook(phase: str) -> None:
        if phase == "wal.append.written":
            raise InjectedCrash(phase)

    q = Queue(qdir, sync=False, hook=hook)
    try:
        q.put("t", {"n": 1})
    except InjectedCrash as exc:
        return q, exc
    raise AssertionError("the hook did not fire")


def test_reopen_after_an_injected_crash_while_the_traceback_references_the_dead_queue(qdir: Path) -> None:
    dead, exc = _crash_on_put(qdir)
    assert exc.__traceback__ is not None  # frames of the dead queue's methods are still alive
    with Queue(qdir, sync=False) as again:
        task = again.get("t")
        assert task is not None  # the frame was complete: it may (here: does) come back
    dead.close()
    del dead, exc


def test_reopen_after_an_injected_crash_inside_a_with_block(qdir: Path) -> None:
    def hook(phase: str) -> None:
        if phase == "wal.append.before":
            raise InjectedCrash(phase)

    with pytest.raises(InjectedCrash):
        with Queue(qdir, sync=False, hook=hook) as q:
            q.put("t", {})
    with Queue(qdir, sync=False) as again:
        assert again.get("t") is None
        assert again.last_seq == 0


# ---------------------------------------------------------------------------
# close and the context manager


def test_close_is_idempotent_and_never_raises(qdir: Path) -> None:
    q = Queue(qdir, sync=False)
    q.put("t", {})
    assert q.close() is None
    assert q.close() is None
    q.close()


def test_close_of_a_poisoned_queue_never_raises(qdir: Path) -> None:
    dead, _ = _crash_on_put(qdir)
    dead.close()
    dead.close()


def test_context_manager_returns_the_queue_and_closes_it(qdir: Path) -> None:
    with Queue(qdir, sync=False) as q:
        assert isinstance(q, Queue)
        q.put("t", {})
    with pytest.raises(QueueClosed):
        q.get("t")
    with Queue(qdir, sync=False):  # ownership ended with the block
        pass


def test_context_manager_closes_on_an_exception_and_lets_it_through(qdir: Path) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with Queue(qdir, sync=False) as q:
            q.put("t", {})
            raise Boom
    with pytest.raises(QueueClosed):
        q.stats()
    with Queue(qdir, sync=False) as again:
        assert again.get("t") is not None


def _all_calls(lease: Lease) -> dict[str, Callable[[Queue], Any]]:
    return {
        "put": lambda q: q.put("x", {}),
        "put-identical-retry": lambda q: q.put("t", {}),
        "put_many": lambda q: q.put_many([{"task_id": "y", "payload": {}}]),
        "put_many-empty": lambda q: q.put_many([]),
        "reserve": lambda q: q.reserve("w", now=0, lease_seconds=5),
        "ack": lambda q: q.ack(lease, now=1),
        "release": lambda q: q.release(lease, now=1),
        "get": lambda q: q.get("t"),
        "tasks": lambda q: q.tasks(),
        "tasks-status": lambda q: q.tasks("ready"),
        "stats": lambda q: q.stats(),
        "compact": lambda q: q.compact(),
        "last_seq": lambda q: q.last_seq,
    }


CALL_NAMES = list(_all_calls(None).keys())  # type: ignore[arg-type]


@pytest.mark.parametrize("name", CALL_NAMES)
def test_every_call_after_close_raises_queue_closed(qdir: Path, name: str) -> None:
    q = Queue(qdir, sync=False)
    q.put("t", {})
    q.put("u", {})
    [lease] = q.reserve("w", now=0, lease_seconds=100)
    q.close()
    with pytest.raises(QueueClosed):
        _all_calls(lease)[name](q)
    q.close()
    with Queue(qdir, sync=False) as again:  # nothing was written by the refused call
        assert again.last_seq == 3


@pytest.mark.parametrize("name", CALL_NAMES)
def test_every_call_on_a_poisoned_queue_raises_queue_closed(qdir: Path, name: str) -> None:
    armed = False

    def hook(phase: str) -> None:
        if armed:
            raise InjectedCrash(phase)

    q = Queue(qdir, sync=False, hook=hook)
    q.put("t", {})
    q.put("u", {})
    [lease] = q.reserve("w", now=0, lease_seconds=100)
    armed = True
    with pytest.raises(InjectedCrash):
        q.put("v", {})
    armed = False
    with pytest.raises(QueueClosed):
        _all_calls(lease)[name](q)
    q.close()
