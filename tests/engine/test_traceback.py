"""A last error's traceback: kept with the error in the same transaction, cut to a bound, never refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from model import Model, read_frames, view
from walqueue import Queue
from walqueue.engine.validate import MAX_FRAME_BYTES, TRACEBACK_BYTES, cut_text_tail

TRACE = 'Traceback (most recent call last):\n  File "app.py", line 3, in handle\nValueError: bad input\n'


def _leased(queue: Queue | Model, task_id: str = "t", payload: dict[str, object] | None = None) -> object:
    queue.put(task_id, payload or {}, max_attempts=3)
    (lease,) = queue.reserve("w", now=0, lease_seconds=10)
    return lease


def test_a_release_with_a_traceback_keeps_it_with_the_last_error_through_reopening(tmp_path: Path) -> None:
    error = {"type": "ValueError", "message": "bad input", "traceback": TRACE}
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.release(_leased(queue), now=5, error=error)  # type: ignore[arg-type]
        task = queue.get("t")
        assert task is not None and task.last_error is not None and task.last_error.traceback == TRACE
        [*_, (_, last)] = read_frames(next((tmp_path / "q").glob("wal-*")))
        assert [op["op"] for op in last["ops"]] == ["error", "traceback", "release"]  # one transaction
        queue.compact()
    with Queue(tmp_path / "q", sync=False) as reopened:
        task = reopened.get("t")
        assert task is not None and task.last_error is not None
        assert task.last_error.traceback == TRACE and task.last_error.to_dict()["traceback"] == TRACE
        # The next error without a traceback replaces it; an expiry too.
        (lease,) = reopened.reserve("w", now=10, lease_seconds=10)
        reopened.release(lease, now=11, error={"type": "KeyError", "message": "k"})
        task = reopened.get("t")
        assert task is not None and task.last_error is not None and task.last_error.traceback is None


def test_a_long_traceback_is_cut_to_its_end_never_refused(tmp_path: Path) -> None:
    long = "frame\n" * 10_000 + "ValueError: the end"
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.fail(_leased(queue), now=5, error={"type": "ValueError", "message": "m", "traceback": long})  # type: ignore[arg-type]
        task = queue.get("t")
        assert task is not None and task.last_error is not None and task.last_error.traceback is not None
        kept = task.last_error.traceback
        assert kept == cut_text_tail(long, TRACEBACK_BYTES) and kept.endswith("ValueError: the end")
        assert len(kept.encode()) <= TRACEBACK_BYTES and kept.startswith("[cut: ")


def test_beside_a_payload_near_the_frame_bound_the_traceback_is_left_out_and_the_error_kept(tmp_path: Path) -> None:
    big = {"blob": "x" * (MAX_FRAME_BYTES - 12_000)}
    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue, payload=big)
        queue.release(lease, now=5, error={"type": "ValueError", "message": "m", "traceback": "é" * 4000})  # type: ignore[arg-type]
        task = queue.get("t")
        assert task is not None and task.last_error is not None
        assert task.last_error.type == "ValueError" and task.last_error.traceback is None


@pytest.mark.parametrize(
    "error",
    [{"type": "E", "message": "m", "traceback": 1}, {"type": "E", "message": "m", "trace": "x"}],
)
def test_a_bad_traceback_is_refused_like_any_bad_error(tmp_path: Path, error: dict[str, object]) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue)
        seq = queue.last_seq
        with pytest.raises((TypeError, ValueError)):
            queue.release(lease, now=5, error=error)  # type: ignore[arg-type, arg-type]
        assert queue.last_seq == seq


def test_the_model_agrees(tmp_path: Path) -> None:
    model = Model()
    error = {"type": "ValueError", "message": "bad", "traceback": "x" * 9000 + "end"}
    with Queue(tmp_path / "q", sync=False) as queue:
        for target in (queue, model):
            target.cancel("t", error=error, now=3) if target.put("t", {}) else None  # type: ignore[union-attr]
        assert view(queue) == view(model)


def test_fsck_shows_a_dead_letters_traceback(tmp_path: Path) -> None:
    import contextlib
    import io
    import json

    from walqueue.format.fsck.cli import main

    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue)
        queue.fail(lease, now=5, error={"type": "ValueError", "message": "bad input", "traceback": TRACE})  # type: ignore[arg-type]
        queue.compact()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--replay", str(tmp_path / "q")]) == 0
    assert 'traceback ending "ValueError: bad input"' in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--replay", "--json", str(tmp_path / "q")]) == 0
    [group] = json.loads(out.getvalue())["replay"]["dead_letters"]["groups"]
    assert group["traceback"] == TRACE
