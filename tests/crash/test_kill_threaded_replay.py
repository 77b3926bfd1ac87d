"""The kill campaign's replay of a threaded life, on lives written here call by call.

The campaign's victim reports ``frame SEQ THREAD CALL`` for every WAL frame
and ``done THREAD CALL DIGEST`` for every call that returned; the parent
replays the life in the model in log order (tools/torture/kill.py). Here the
calls run in this process on a real queue, one after another in the order
written, and the life the parent would have read is built from their frames
and answers: a deterministic replay of an interleaving that threads make
only now and then.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torture.kill as kill
from torture.harness import Abort, Report
from torture.kill import ChildLife
from torture.kill_child import ThreadOps, answer_of
from torture.workload import Op, text_digest

from model import Model, view
from walqueue import Lease, Queue

Step = Callable[[list[Lease]], Op]


class _Scripted(ThreadOps):
    """A thread's calls from a script (each step makes its op from the leases held), fed as `ThreadOps` is."""

    def __init__(self, thread: str, steps: list[Step]) -> None:
        super().__init__(0, 0, 1, thread)
        self.steps = list(steps)

    def next_op(self) -> Op:
        if not self.steps:
            return Op("tasks", {"status": "dead"})  # past the script: a call the life never made
        return self.steps.pop(0)(self.held)


def _run_life(directory: Path, scripts: dict[str, list[Step]], order: list[str]) -> ChildLife:
    """Run the threads' calls on the queue in `order` (a thread's name per call); what the victim reports."""
    life = ChildLife(ready=True)
    calls: dict[int, int] = {}
    threads = {name: _Scripted(name, steps) for name, steps in scripts.items()}
    index = dict.fromkeys(scripts, 0)
    with Queue(directory) as queue:
        for name in order:
            op = threads[name].next_op()
            before = queue.last_seq
            text, value = answer_of(op, queue)
            for seq in range(before + 1, queue.last_seq + 1):
                life.frames.append((seq, name))
                calls[seq] = index[name]
            life.thread_done.setdefault(name, {})[index[name]] = text_digest(text)
            threads[name].feed(op, value)
            index[name] += 1
    life.frame_calls = calls
    return life


def _reserve(worker: str, now: int, lease_seconds: int) -> Step:
    return lambda held: Op("reserve", {"worker": worker, "now": now, "lease_seconds": lease_seconds, "limit": 1})


def _extend(now: int, lease_seconds: int) -> Step:
    return lambda held: Op("extend", {"lease": held[0], "now": now, "lease_seconds": lease_seconds})


def _put(task_id: str) -> Step:
    return lambda held: Op("put", {"spec": {"task_id": task_id, "payload": {}}})


def _lived(tmp_path: Path, scripts: dict[str, list[Step]], order: list[str]) -> tuple[Path, ChildLife, Model]:
    """Put task x (one attempt), then live the life: the store, what the victim reported, the model before it."""
    directory = tmp_path / "store"
    model = Model()
    model.put("x", {}, max_attempts=1)
    with Queue(directory) as queue:
        queue.put("x", {}, max_attempts=1)
    return directory, _run_life(directory, scripts, order), model


def _replay(
    monkeypatch: pytest.MonkeyPatch, scripts: dict[str, list[Step]], directory: Path, life: ChildLife, model: Model
) -> Report:
    """Replay the life as the campaign does (its threads' calls rebuilt from `scripts`); the report."""
    monkeypatch.setattr(kill, "ThreadOps", lambda seed, unit, epoch, name: _Scripted(name, scripts[name]))
    report = Report("kill")
    replayed = kill._check_threaded_life(directory, 0, 0, 1, len(scripts), life, model, report, "replay")
    with Queue(directory) as queue:
        assert view(replayed) == view(queue)
    return report


def test_an_empty_reserve_that_reaped_is_replayed_at_its_frame_not_where_its_answer_first_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # T0 leases x until 60, then shortens the lease to 13. T1's reserve at
    # now=20 ran after that: it reaped x (dead: one attempt) and leased
    # nothing. Its answer, [], fits every state since T0's lease, where it
    # would reap nothing: placed there, as a call that writes nothing, it
    # left its reap frame to T1's next call (the put), and the model went on
    # without the reap (seen as "the model writes 2 frames" on a later
    # reserve, an acknowledged call not found, or the stores differing).
    scripts = {
        "T0": [_reserve("T0", 10, 50), _extend(11, 2)],
        "T1": [_reserve("T1", 20, 5), _put("y")],
    }
    directory, life, model = _lived(tmp_path, scripts, ["T0", "T0", "T1", "T1"])
    assert [(seq, life.frame_calls[seq]) for seq, _ in life.frames if _ == "T1"] == [(4, 0), (5, 1)]
    report = _replay(monkeypatch, scripts, directory, life, model)
    assert report.counts["threaded operations done"] == 4


def test_a_frame_the_log_gives_to_a_later_call_than_the_replay_reached_is_a_divergence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # T1's reserve wrote nothing, but the answer reported for it is one no
    # state gives: the replay stops at T1's next frame, which the log gives to
    # T1's call 1, rather than giving that frame to the reserve.
    scripts = {"T0": [_reserve("T0", 10, 50)], "T1": [_reserve("T1", 12, 5), _put("y")]}
    directory, life, model = _lived(tmp_path, scripts, ["T0", "T1", "T1"])
    life.thread_done["T1"][0] = text_digest("ok [] (never)")
    with pytest.raises(Abort, match=r"T1 call 0 .* at frame 3: the log says \('T1', 1\) wrote it"):
        _replay(monkeypatch, scripts, directory, life, model)
