"""CONTRACT §2 poisoning: a hook that raises kills the queue, nothing else does.

If the hook raises (`InjectedCrash` or any other exception) the exception
propagates unchanged, the queue releases its files and lock at once, and
every later call raises `QueueClosed`. A failure before anything is written
(bad arguments, `KeyConflict`, `StaleLease`) poisons nothing and calls no
hook phase.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from model import Model, directory_digest, view
from walqueue import PHASES, InjectedCrash, KeyConflict, Queue, QueueClosed, StaleLease

APPEND_PHASES = ["wal.append.before", "wal.append.partial", "wal.append.written", "wal.append.synced"]
COMPACT_PHASES = [
    "wal.rotate.before",
    "wal.rotate.after",
    "snapshot.partial",
    "snapshot.written",
    "snapshot.synced",
    "current.written",
    "current.published",
    "segment.deleted",
    "compact.done",
]


class Recorder:
    """A hook that records every phase and raises `error` at the `when`-th call of `phase`."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self.phase: str | None = None
        self.error: BaseException | None = None

    def arm(self, phase: str, error: BaseException) -> None:
        self.phase, self.error = phase, error

    def __call__(self, phase: str) -> None:
        self.phases.append(phase)
        if phase == self.phase and self.error is not None:
            error, self.error = self.error, None
            raise error


def open_recorded(qdir: Path, **kwargs: Any) -> tuple[Queue, Recorder]:
    hook = Recorder()
    return Queue(qdir, sync=False, hook=hook, compact_bytes=None, **kwargs), hook


def assert_poisoned(q: Queue, qdir: Path) -> None:
    """Later calls raise QueueClosed, close() is quiet, and the lock is already free."""
    with pytest.raises(QueueClosed):
        q.get("a")
    with pytest.raises(QueueClosed):
        q.put("zz", {})
    with pytest.raises(QueueClosed):
        _ = q.last_seq
    with pytest.raises(QueueClosed):
        q.stats()
    with Queue(qdir, sync=False) as other:  # while `q` is still referenced
        assert other.last_seq >= 0
    q.close()
    q.close()


# ---------------------------------------------------------------------------
# phases


def test_phases_is_the_tuple_of_spec_names() -> None:
    assert isinstance(PHASES, tuple)
    assert list(PHASES) == APPEND_PHASES + COMPACT_PHASES + ["recover.truncate.before", "recover.truncate.after"]


@pytest.mark.parametrize("sync", [False, True])
def test_one_transaction_calls_the_append_phases_in_order(qdir: Path, sync: bool) -> None:
    hook = Recorder()
    with Queue(qdir, sync=sync, hook=hook, compact_bytes=None) as q:
        assert hook.phases == []  # opening a fresh directory calls no phase
        q.put("a", {})
        assert hook.phases == APPEND_PHASES
        hook.phases.clear()
        q.get("a"), q.tasks(), q.stats()
        assert hook.phases == []


def test_reserve_with_a_reap_calls_the_append_phases_twice(qdir: Path) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {})
    q.reserve("w", now=0, lease_seconds=5)
    hook.phases.clear()
    q.reserve("w", now=5, lease_seconds=5)
    assert hook.phases == APPEND_PHASES * 2
    q.close()


def test_compact_calls_the_compaction_phases_in_order(qdir: Path) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {})
    hook.phases.clear()
    q.compact()
    assert [p for p in hook.phases if p in COMPACT_PHASES] == hook.phases
    order = [COMPACT_PHASES.index(p) for p in hook.phases]
    assert order == sorted(order)
    assert {"wal.rotate.before", "wal.rotate.after", "snapshot.written", "snapshot.synced"} <= set(hook.phases)
    assert {"current.written", "current.published", "compact.done"} <= set(hook.phases)
    assert hook.phases[-1] == "compact.done"
    q.close()


def test_compact_with_nothing_appended_calls_only_compact_done(qdir: Path) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {})
    q.compact()
    hook.phases.clear()
    q.compact()
    assert [p for p in hook.phases if p != "segment.deleted"] == ["compact.done"]
    q.close()


# ---------------------------------------------------------------------------
# poisoning by the hook


@pytest.mark.parametrize("phase", APPEND_PHASES)
def test_injected_crash_during_an_append_propagates_unchanged_and_poisons(qdir: Path, phase: str) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {"n": 1})
    crash = InjectedCrash(phase)
    hook.arm(phase, crash)
    with pytest.raises(InjectedCrash) as info:
        q.put("b", {"n": 2})
    assert info.value is crash
    assert hook.phases[-1] == phase  # no phase after the one that raised
    assert_poisoned(q, qdir)
    with Queue(qdir, sync=False) as again:
        # rule 6: a complete frame may come back, an incomplete one must not
        expected = {"wal.append.before": 1, "wal.append.partial": 1}.get(phase, 2)
        assert again.last_seq == expected
        assert (again.get("b") is not None) == (expected == 2)


@pytest.mark.parametrize("error", [RuntimeError("boom"), OSError(28, "No space"), ValueError("hook"), KeyConflict("x")])
def test_any_exception_from_the_hook_propagates_unchanged_and_poisons(qdir: Path, error: Exception) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {})
    hook.arm("wal.append.written", error)
    with pytest.raises(type(error)) as info:
        q.put("b", {})
    assert info.value is error
    assert_poisoned(q, qdir)


def test_a_base_exception_from_the_hook_also_poisons(qdir: Path) -> None:
    class Dying(BaseException):
        pass

    q, hook = open_recorded(qdir)
    q.put("a", {})
    dying = Dying()
    hook.arm("wal.append.partial", dying)
    with pytest.raises(Dying) as info:
        q.put("b", {})
    assert info.value is dying
    assert_poisoned(q, qdir)


@pytest.mark.parametrize("phase", COMPACT_PHASES)
def test_injected_crash_during_compaction_poisons_and_reopening_keeps_the_state(qdir: Path, phase: str) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {"n": 1})
    q.put("b", {"n": 2})
    [lease] = q.reserve("w", now=0, lease_seconds=10)
    q.ack(lease, now=1)
    q.compact()  # a first snapshot, so that the second compaction deletes a segment
    q.put("c", {"n": 3})
    before = view(q)
    hook.arm(phase, InjectedCrash(phase))
    with pytest.raises(InjectedCrash):
        q.compact()
    assert_poisoned(q, qdir)
    with Queue(qdir, sync=False) as again:
        assert view(again) == before
        again.put("d", {})  # and it goes on from there


@pytest.mark.parametrize("verb", ["reserve", "ack", "release", "put_many"])
def test_injected_crash_in_every_writing_call_poisons(qdir: Path, verb: str) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {})
    q.put("b", {})
    [lease] = q.reserve("w", now=0, lease_seconds=10)
    calls: dict[str, Callable[[], Any]] = {
        "reserve": lambda: q.reserve("w", now=0, lease_seconds=10),
        "ack": lambda: q.ack(lease, now=1),
        "release": lambda: q.release(lease, now=1),
        "put_many": lambda: q.put_many([{"task_id": "c", "payload": {}}]),
    }
    crash = InjectedCrash("x")
    hook.arm("wal.append.before", crash)
    with pytest.raises(InjectedCrash) as info:
        calls[verb]()
    assert info.value is crash
    assert_poisoned(q, qdir)


def test_automatic_compaction_crash_poisons_the_call_that_triggered_it(qdir: Path) -> None:
    hook = Recorder()
    q = Queue(qdir, sync=False, hook=hook, compact_bytes=512)
    hook.arm("snapshot.written", InjectedCrash("auto"))
    model = Model()
    q.put("a", {"pad": "x" * 50}, max_attempts=10**9)
    model.put("a", {"pad": "x" * 50}, max_attempts=10**9)
    before = model
    with pytest.raises(InjectedCrash):
        for now in range(10_000):  # churn: the WAL grows, the state does not
            before = model.clone()
            [expected] = model.reserve("w", now=now, lease_seconds=5)
            [lease] = q.reserve("w", now=now, lease_seconds=5)
            before = model.clone()
            model.release(expected, now=now)
            q.release(lease, now=now)
    assert_poisoned(q, qdir)
    with Queue(qdir, sync=False) as again:
        # the automatic compaction ran around the call's own transaction, which
        # was either durable before it began or not started
        assert view(again) in (view(before), view(model))


def test_hook_crash_while_opening_releases_the_lock(qdir: Path) -> None:
    with Queue(qdir, sync=False) as q:
        q.put("a", {})
    segment = sorted(qdir.glob("wal-*.log"))[-1]
    with segment.open("ab") as f:
        f.write(b"\x00\x00")  # a torn length: opening truncates it
    hook = Recorder()
    hook.arm("recover.truncate.before", InjectedCrash("open"))
    with pytest.raises(InjectedCrash):
        Queue(qdir, sync=False, hook=hook)
    with Queue(qdir, sync=False) as again:  # the lock is free, and the truncation happens now
        assert again.get("a") is not None and again.last_seq == 1


def _descriptors_of(path: Path) -> list[int]:
    """This process's open descriptors on `path` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc/self/fd"):
        try:
            if os.path.realpath(os.readlink(f"/proc/self/fd/{entry}")) == os.path.realpath(path):
                found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_an_os_error_during_a_write_poisons_and_propagates_unwrapped(qdir: Path) -> None:
    # A real OS error, not one raised by the hook: just before the frame is
    # written, the hook swaps the segment's descriptor for a read-only one and
    # returns normally, so the engine's own write fails with EBADF.
    armed = False

    def sabotage(phase: str) -> None:
        if armed and phase == "wal.append.before":
            read_only = os.open(os.devnull, os.O_RDONLY)
            try:
                for segment in qdir.glob("wal-*.log"):
                    for fd in _descriptors_of(segment):
                        os.dup2(read_only, fd)
            finally:
                os.close(read_only)

    q = Queue(qdir, sync=False, hook=sabotage, compact_bytes=None)
    q.put("a", {"n": 1})
    before = view(q)
    armed = True
    with pytest.raises(OSError) as info:
        q.put("b", {"n": 2})
    assert info.value.errno == errno.EBADF  # the engine's own OSError, unwrapped
    armed = False
    assert_poisoned(q, qdir)
    with Queue(qdir, sync=False) as again:
        assert view(again) == before  # nothing of the failed frame was written


@pytest.mark.parametrize("with_hook", [False, True], ids=["one-write", "two-part-write"])
def test_short_os_writes_are_finished_and_the_log_reads_back(
    qdir: Path, monkeypatch: pytest.MonkeyPatch, with_hook: bool
) -> None:
    # os.write may write less than asked; both of the writer's paths (one
    # write without a hook, two parts with one) must finish the frame.
    real_write = os.write

    def trickle(fd: int, data: bytes | memoryview) -> int:
        return real_write(fd, bytes(data[:7]))

    q = Queue(qdir, sync=False, hook=(lambda phase: None) if with_hook else None, compact_bytes=None)
    monkeypatch.setattr(os, "write", trickle)
    q.put("a", {"n": 1, "text": "x" * 50})
    q.put_many([{"task_id": "b", "payload": {}}, {"task_id": "c", "payload": {"k": [1, 2]}, "key": "kc"}])
    [lease] = q.reserve("w", now=10, lease_seconds=5)
    q.ack(lease, now=11)
    before = view(q)
    q.close()
    monkeypatch.setattr(os, "write", real_write)
    with Queue(qdir, sync=False) as again:
        assert view(again) == before


# ---------------------------------------------------------------------------
# failures before anything is written poison nothing


def test_failures_before_writing_poison_nothing_and_call_no_phase(qdir: Path) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {"n": 1})
    [lease] = q.reserve("w", now=0, lease_seconds=10)
    q.ack(lease, now=1)
    hook.phases.clear()
    before = directory_digest(qdir)
    hook.arm("wal.append.before", InjectedCrash("must not fire"))
    with pytest.raises(TypeError):
        q.put(1, {})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        q.put("b", {"x": float("nan")})
    with pytest.raises(ValueError):
        q.reserve("w", now=0, lease_seconds=0)
    with pytest.raises(KeyConflict):
        q.put("a", {"n": 2})
    with pytest.raises(KeyConflict):
        q.put_many([{"task_id": "c", "payload": {}}, {"task_id": "a", "payload": {}, "key": "k"}])
    with pytest.raises(StaleLease):
        q.ack(lease, now=2)
    with pytest.raises(StaleLease):
        q.release(lease, now=2)
    assert q.put("a", {"n": 1}) == "a"  # identical retry
    assert q.put_many([]) == []
    assert q.reserve("w", now=5, lease_seconds=5) == []
    assert hook.phases == []
    assert directory_digest(qdir) == before
    # still alive: the armed hook now fires on the first real write
    with pytest.raises(InjectedCrash):
        q.put("b", {})
    assert_poisoned(q, qdir)


def test_a_lease_token_from_a_poisoned_queue_works_on_the_reopened_one(qdir: Path) -> None:
    q, hook = open_recorded(qdir)
    q.put("a", {})
    [lease] = q.reserve("w", now=0, lease_seconds=10)
    hook.arm("wal.append.before", InjectedCrash("x"))
    with pytest.raises(InjectedCrash):
        q.put("b", {})
    with Queue(qdir, sync=False) as again:
        again.ack(lease, now=5)
        assert again.get("a").status == "completed"  # type: ignore[union-attr]
