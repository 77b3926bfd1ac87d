"""Crash-point enumeration: every call of every phase, against the reference model.

A seeded, mixed workload (puts, identical retries, conflicts, put_many,
reserves that reap (recording LeaseExpired), acks, releases, fails,
extends, redrives, cancels (releases, fails and cancels often with an error
to record, its op in the same transaction), stale tokens, explicit
compactions and automatic ones with a tiny threshold) runs step by step.
Before each step,
the step is replayed on copies of the directory and killed by
`InjectedCrash` at each of its phase calls in turn; each copy must reopen
at once and equal the model as it was before the step, or as it was after
exactly those of the step's transactions whose frames were complete when
it died (CONTRACT §4 rules 6 and 7). One of those crashed copies (chosen by the
seed) then becomes the main line, and the workload continues from it, so
recovery is also tested from states that only crashes produce.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from model import Model, render, view
from walqueue import PHASES, InjectedCrash, KeyConflict, Lease, Queue, StaleLease, WrongStatus

COMPACT_BYTES = 1500

Step = Callable[[Any], Any]


class Crasher:
    """A hook that records phases and raises `InjectedCrash` at call number `crash_at`."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.crash_at = crash_at
        self.phases: list[str] = []

    def __call__(self, phase: str) -> None:
        self.phases.append(phase)
        if self.crash_at is not None and len(self.phases) - 1 == self.crash_at:
            raise InjectedCrash(phase)


def _outcome(step: Step, target: Any) -> tuple[str, Any]:
    """The step's answer as exact text (errors by class: `WrongStatus` is a ValueError), and the raw value."""
    try:
        value = step(target)
    except (KeyConflict, StaleLease, WrongStatus, ValueError, TypeError) as exc:
        return "error " + type(exc).__name__, None
    return "ok " + render(value), value


class Workload:
    """Chooses the next step from the model's state, so that every kind of call stays possible."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 0
        self.next_id = 0
        self.tokens: list[Lease] = []
        self.stale: list[Lease] = []
        self.puts: list[dict[str, Any]] = []

    def _new_put(self) -> dict[str, Any]:
        rng = self.rng
        self.next_id += 1
        spec = {
            "task_id": f"t{self.next_id:04d}",
            "payload": {"n": self.next_id, "blob": "x" * rng.randrange(0, 60)},
            "available_at": self.now + rng.choice([0, 0, 0, 3]),
            "max_attempts": rng.choice([1, 2, 3]),
        }
        if rng.random() < 0.3:
            spec["key"] = f"k{self.next_id:04d}"
        self.puts.append(spec)
        return spec

    def next_step(self, model: Model) -> tuple[str, Step, dict[str, Any]]:
        """Return (description, step, info) where info tells how to derive intermediate model states.

        `model` (the state before the step) is read only to pick a redrive's
        dead task and a cancel's ready or leased one.
        """
        rng = self.rng
        self.now += rng.choice([0, 1, 1, 2, 5])
        now = self.now
        kind = rng.choices(
            ["put", "retry", "conflict", "put_many", "reserve", "ack", "release", "stale", "compact"]
            + ["extend", "redrive", "cancel", "fail"],
            weights=[6, 1, 1, 2, 5, 4, 2, 1, 1] + [3, 2, 2, 2],
        )[0]
        if kind == "put" or (kind in ("retry", "conflict") and not self.puts):
            spec = self._new_put()
            return "put", lambda t: t.put(**spec), {}
        if kind == "retry":
            spec = dict(rng.choice(self.puts))
            return "put-retry", lambda t: t.put(**spec), {}
        if kind == "conflict":
            spec = dict(rng.choice(self.puts))
            spec["payload"] = {"other": True}
            return "put-conflict", lambda t: t.put(**spec), {}
        if kind == "put_many":
            items = [self._new_put() for _ in range(rng.randrange(1, 4))]
            if self.puts[: -len(items)] and rng.random() < 0.5:
                items.append(dict(rng.choice(self.puts[: -len(items)])))
            return "put_many", lambda t: t.put_many([dict(i) for i in items]), {}
        if kind == "reserve":
            worker = rng.choice(["w1", "w2"])
            lease_seconds = rng.choice([1, 2, 4, 10])  # 10: long enough to be extended and acked
            limit = rng.choice([1, 2, 3])

            def reserve(t: Any) -> Any:
                return t.reserve(worker, now=now, lease_seconds=lease_seconds, limit=limit)

            return "reserve", reserve, {"reap_now": now}
        error = rng.choice(
            [None, {"type": "OSError", "message": f"disk full at {now}"}, {"type": "E", "message": "é" * 1100}]
        )
        if kind == "fail":
            # A permanent failure of a lease not yet over (the model's leased tasks, as for extend).
            live = [Lease(t.task_id, t.worker, t.generation) for t in model.tasks("leased") if t.deadline > now]
            if live:
                token = rng.choice(live)
                return "fail", lambda t: t.fail(token, now=now, error=error), {}
        if kind in ("ack", "release", "fail") and self.tokens:
            token = self.tokens.pop(rng.randrange(len(self.tokens)))
            self.stale.append(token)
            if kind == "ack":
                return "ack", lambda t: t.ack(token, now=now), {}
            if kind == "fail":
                return "fail", lambda t: t.fail(token, now=now, error=error), {}
            delay = rng.choice([0, 1, 3])
            return "release", lambda t: t.release(token, now=now, delay=delay, error=error), {}
        if kind == "extend":
            # A heartbeat of a lease not yet over, from the three fields a worker keeps (the model's
            # leased tasks, so that a crash the workload went on from loses no candidate); else an old token.
            live = [Lease(t.task_id, t.worker, t.generation) for t in model.tasks("leased") if t.deadline > now]
            if not live and not self.tokens:
                spec = self._new_put()
                return "put", lambda t: t.put(**spec), {}
            token = rng.choice(live or self.tokens)
            lease_seconds = rng.choice([1, 3, 6])
            return "extend", lambda t: t.extend(token, now=now, lease_seconds=lease_seconds), {}
        if kind in ("redrive", "cancel"):
            statuses = ("dead",) if kind == "redrive" else ("ready", "leased")
            candidates = [task.task_id for task in model.tasks() if task.status in statuses]
            if candidates or rng.random() < 0.2:  # sometimes a task in the wrong status: WrongStatus
                known = [task.task_id for task in model.tasks()] or ["never"]
                task_id = rng.choice(candidates or known)
                if kind == "cancel":
                    return "cancel", lambda t: t.cancel(task_id, error=error, now=now), {}
                available_at = now + rng.choice([0, 0, 2])
                extra = rng.choice([1, 1, 2])
                return "redrive", lambda t: t.redrive(task_id, available_at=available_at, extra_attempts=extra), {}
        if kind == "stale" and self.stale:
            token = rng.choice(self.stale)
            verb = rng.choice(["ack", "extend"])
            if verb == "extend":
                return "stale-extend", lambda t: t.extend(token, now=now, lease_seconds=2), {}
            return "stale-ack", lambda t: t.ack(token, now=now), {}
        if kind == "compact":
            return "compact", lambda t: t.compact(), {}
        spec = self._new_put()
        return "put", lambda t: t.put(**spec), {}

    def learn(self, result: Any) -> None:
        if isinstance(result, list) and result and isinstance(result[0], Lease):
            self.tokens.extend(result)
        elif isinstance(result, Lease):  # an extend's token
            self.tokens.append(result)


def _expected_states(model: Model, step: Step, info: dict[str, Any]) -> list[Model]:
    """Model states after 0, 1, ... of the step's transactions (the last one is the full step)."""
    states = [model.clone()]
    if "reap_now" in info:
        reaped = model.clone()
        if reaped.reap(info["reap_now"]) > 0:
            states.append(reaped)
    after = model.clone()
    _outcome(step, after)
    if after.last_seq != states[-1].last_seq:
        states.append(after)
    return states


def _open(directory: Path, hook: Callable[[str], None] | None = None) -> Queue:
    return Queue(directory, hook=hook, sync=False, compact_bytes=COMPACT_BYTES)


@pytest.mark.parametrize("seed", [1, 2])
def test_every_crash_point_recovers_to_a_model_state(tmp_path: Path, seed: int) -> None:
    steps = 100
    rng = random.Random(seed * 7919)
    workload = Workload(seed)
    model = Model()
    main = tmp_path / "main"
    scratch = tmp_path / "scratch"
    adopted = tmp_path / "adopted"
    seen_phases: set[str] = set()
    crash_points = 0
    #: step name -> crash points in a step of that name whose transaction was written (it had one)
    crashed_writes: dict[str, int] = {}

    queue = _open(main)
    for index in range(steps):
        name, step, info = workload.next_step(model)
        states = _expected_states(model, step, info)
        queue.close()

        # How many phase calls does the step make when nothing goes wrong?
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(main, scratch)
        counter = Crasher()
        probe = _open(scratch, counter)
        _outcome(step, probe)
        probe.close()
        seen_phases.update(counter.phases)

        adopt_at = rng.randrange(len(counter.phases) + 1)
        for crash_at in range(len(counter.phases)):
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.copytree(main, scratch)
            crasher = Crasher(crash_at)
            crashing = _open(scratch, crasher)
            with pytest.raises(InjectedCrash):
                step(crashing)
            crash_points += 1
            complete = crasher.phases.count("wal.append.written")
            if len(states) > 1:
                crashed_writes[name] = crashed_writes.get(name, 0) + 1
            reopen_hook = Crasher()
            reopened = _open(scratch, reopen_hook)  # at once: the dead object still exists
            seen_phases.update(reopen_hook.phases)
            assert set(reopen_hook.phases) <= {"recover.truncate.before", "recover.truncate.after"}
            expected = states[min(complete, len(states) - 1)]
            assert view(reopened) == view(expected), (
                f"step {index} ({name}) crashed at phase call {crash_at} ({crasher.phases[-1]})"
            )
            reopened.close()
            del crashing
            if crash_at == adopt_at:
                shutil.rmtree(adopted, ignore_errors=True)
                shutil.copytree(scratch, adopted)
                adopted_model = expected.clone()

        if adopt_at < len(counter.phases):
            # Continue the workload from the crashed copy; the caller never saw the step's answer.
            shutil.rmtree(main)
            shutil.copytree(adopted, main)
            model = adopted_model
            queue = _open(main)
        else:
            queue = _open(main)
            result_queue, value = _outcome(step, queue)
            result_model, _ = _outcome(step, model)
            assert result_queue == result_model, f"step {index} ({name})"
            workload.learn(value)
        assert view(queue) == view(model), f"after step {index} ({name})"
    queue.close()

    # Recovery from the final directory equals the model too.
    final = _open(main)
    assert view(final) == view(model)
    final.close()
    assert crash_points > 100
    # Transactions of each lifecycle kind were crashed at (not only refused calls of those names).
    assert {"extend", "redrive", "cancel", "fail"} <= crashed_writes.keys(), crashed_writes
    assert any(task.last_error is not None for task in model.tasks()), "no last error was ever recorded"
    missing = set(PHASES) - seen_phases
    assert not missing, f"the workload never reached {sorted(missing)}"
