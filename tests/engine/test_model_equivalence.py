"""The Queue and the reference Model give identical answers to any program.

Random programs of puts, put_manys, reserves, acks, releases, fails, extends
(valid and stale tokens), redrives and cancels (of tasks in every status, and
of unknown ones), with and without an error to record (short, cut, with lone
surrogates), reads, bad calls, `compact()` and close/reopen run against
`Queue(sync=False)` with a tiny `compact_bytes` (so automatic compaction
happens often) and against `tests.model.Model`; every result, every error
class and, after every step, the whole state (`view`, with the
`next_available_at`/`next_deadline` keys of `stats()`) must be the same.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from model import STATUSES, Model, render, view
from walqueue import InjectedCrash, KeyConflict, Lease, Queue, StaleLease, WrongStatus

TASK_IDS = ["a", "b", "c", "B", "é", "a1", "a10"]
KEYS = [None, None, None, "k1", "k2", "a", "b"]
PAYLOADS: list[dict[str, Any]] = [{}, {"v": 1}, {"v": 1.0}, {"v": True}, {"v": [1, {"w": None}]}, {"z": "é"}]
WORKERS = ["w1", "w2", "é"]
#: Errors for release, fail and cancel: none, ordinary ones, and ones the planner must cut or escape.
ERRORS: list[dict[str, str] | None] = [
    None,
    None,
    {"type": "ValueError", "message": "bad input"},
    {"type": "E", "message": ""},
    {"type": "é\ud800", "message": "\x00\n\udfff"},
    {"type": "T" * 300, "message": "é" * 1500},
]
BAD_CALLS: list[Callable[[Any], Any]] = [
    lambda q: q.put("a", {"v": float("nan")}),
    lambda q: q.put("a", {"v": (1,)}),
    lambda q: q.put("", {}),
    lambda q: q.put("a", {}, max_attempts=0),
    lambda q: q.put("a", {}, available_at=-1),
    lambda q: q.put("a", {}, put_at=-1),
    lambda q: q.put("a", {}, put_at=True),
    lambda q: q.put_many([{"task_id": "x", "payload": {}, "put_at": 1.5}]),
    lambda q: q.put_many([{"task_id": "x", "payload": {}}, {"task_id": "y", "payload": {}, "bogus": 1}]),
    lambda q: q.reserve("w1", now=0, lease_seconds=0),
    lambda q: q.reserve("w1", now=0, lease_seconds=1, limit=0),
    lambda q: q.reserve("", now=0, lease_seconds=1),
    lambda q: q.tasks("pending"),
    lambda q: q.extend("not a lease", now=0, lease_seconds=1),
    lambda q: q.extend(Lease("a", "w1", 1), now=-1, lease_seconds=1),
    lambda q: q.extend(Lease("a", "w1", 1), now=0, lease_seconds=0),
    lambda q: q.extend(Lease("a", "w1", 1), now=0, lease_seconds=True),
    lambda q: q.redrive("a", available_at=-1),
    lambda q: q.redrive("a", available_at=0, extra_attempts=0),
    lambda q: q.redrive("a", available_at=1.0),
    lambda q: q.redrive("", available_at=0),
    lambda q: q.redrive(1, available_at=0),
    lambda q: q.cancel(""),
    lambda q: q.cancel(None),
    lambda q: q.cancel("x" * 1025),
    lambda q: q.release(Lease("a", "w1", 1), now=0, error="boom"),
    lambda q: q.release(Lease("a", "w1", 1), now=0, error={"type": "E"}),
    lambda q: q.release(Lease("a", "w1", 1), now=0, error={"type": "E", "message": "m", "at": 1}),
    lambda q: q.fail(Lease("a", "w1", 1), now=0, error={"type": "", "message": "m"}),
    lambda q: q.fail(Lease("a", "w1", 1), now=0, error={"type": "E", "message": 1}),
    lambda q: q.fail("not a lease", now=0),
    lambda q: q.fail(Lease("a", "w1", 1), now=-1),
    lambda q: q.give_back("not a lease", now=0),
    lambda q: q.give_back(Lease("a", "w1", 1), now=-1),
    lambda q: q.cancel("a", error={"type": "E", "message": "m"}),
    lambda q: q.cancel("a", error={"type": "E", "message": "m"}, now=-1),
    lambda q: q.cancel("a", error=["type", "message"], now=0),
]


def outcome(call: Callable[[], Any]) -> tuple[tuple[str, str], Any]:
    """(("ok", exact result) or ("error", its class), the raw result).

    TypeError and ValueError are one class here: which of the two a bad
    argument raises is tested in test_api_errors.py. `WrongStatus`, a
    ValueError too, is told apart: it depends on the state, not the arguments.
    """
    try:
        value = call()
    except WrongStatus:
        return ("error", "WrongStatus"), None
    except (TypeError, ValueError):
        return ("error", "bad-argument"), None
    except (KeyConflict, StaleLease) as exc:
        return ("error", type(exc).__name__), None
    return ("ok", render(value)), value


def forged(lease: Lease, forge: str) -> Lease:
    """`lease` as handed out, or spoiled one way: another worker or generation, an informational
    change (payload and deadline), or the three owner fields alone."""
    if forge == "worker":
        return dataclasses.replace(lease, worker=lease.worker + "x")
    if forge == "generation":
        return dataclasses.replace(lease, generation=lease.generation + 1)
    if forge == "payload":
        return dataclasses.replace(lease, payload={"forged": 1}, deadline=lease.deadline + 100)
    if forge == "bare":
        return Lease(lease.task_id, lease.worker, lease.generation)
    return lease


class Harness:
    """One Queue and one Model driven in lockstep."""

    def __init__(self, compact_bytes: int | None) -> None:
        self.directory = tempfile.mkdtemp(prefix="walqueue-equiv-")
        self.compact_bytes = compact_bytes
        self.queue = Queue(self.directory, sync=False, compact_bytes=compact_bytes)
        self.model = Model()
        self.leases: list[Lease] = []
        self.now = 0
        self.log: list[str] = []
        #: call name -> how many times it succeeded, so that a seeded run can prove it reached each call.
        self.succeeded: collections.Counter[str] = collections.Counter()

    def close(self) -> None:
        self.queue.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def same(self, label: str, call: Callable[[Any], Any]) -> Any:
        """Run `call` on both; the outcomes must match. Returns the queue's raw result."""
        self.log.append(label)
        expected, _ = outcome(lambda: call(self.model))
        got, value = outcome(lambda: call(self.queue))
        assert got == expected, f"{label}: queue gave {got}, model gave {expected}; program: {self.log}"
        if got[0] == "ok":
            self.succeeded[label.split("(", 1)[0]] += 1
        return value

    def check(self) -> None:
        assert view(self.queue) == view(self.model), f"states differ after {self.log}"
        assert self.queue.stats()["last_seq"] == self.model.last_seq

    # -- the operations ---------------------------------------------------

    def put(self, task_id: str, payload: dict[str, Any], key: str | None, available_at: int, max_attempts: int) -> None:
        self.same(
            f"put({task_id!r}, {payload!r}, key={key!r}, available_at={available_at}, max_attempts={max_attempts})",
            lambda q: q.put(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts),
        )

    def put_many(self, items: list[dict[str, Any]]) -> None:
        self.same(f"put_many({items!r})", lambda q: q.put_many(items))

    def reserve(self, worker: str, step: int, lease_seconds: int, limit: int) -> None:
        self.now = max(0, self.now + step)
        now = self.now
        leases = self.same(
            f"reserve({worker!r}, now={now}, lease_seconds={lease_seconds}, limit={limit})",
            lambda q: q.reserve(worker, now=now, lease_seconds=lease_seconds, limit=limit),
        )
        self.leases.extend(leases or [])

    def finish(
        self, verb: str, index: int, offset: int, forge: str, delay: int, error: dict[str, str] | None = None
    ) -> None:
        if not self.leases:
            return
        lease = forged(self.leases[index % len(self.leases)], forge)
        now = max(0, lease.deadline + offset)
        if verb == "ack":
            self.same(f"ack({lease!r}, now={now})", lambda q: q.ack(lease, now=now))
        elif verb == "fail":
            self.same(f"fail({lease!r}, now={now}, error={error!r:.60})", lambda q: q.fail(lease, now=now, error=error))
        elif verb == "give_back":
            self.same(f"give_back({lease!r}, now={now})", lambda q: q.give_back(lease, now=now))
        else:
            self.same(
                f"release({lease!r}, now={now}, delay={delay}, error={error!r:.60})",
                lambda q: q.release(lease, now=now, delay=delay, error=error),
            )

    def ack_many(self, indexes: list[int], offset: int, forges: list[str]) -> None:
        """Ack several tokens handed out (perhaps forged, perhaps one twice) in one call: all or none."""
        if not self.leases:
            return
        leases = [forged(self.leases[i % len(self.leases)], f) for i, f in zip(indexes, forges, strict=False)]
        now = max(0, min((lease.deadline for lease in leases), default=0) + offset)
        self.same(f"ack_many({leases!r}, now={now})", lambda q: q.ack_many(leases, now=now))

    def extend(self, index: int, offset: int, forge: str, lease_seconds: int) -> None:
        """Extend one of the tokens handed out (perhaps forged); a new token joins the others."""
        if not self.leases:
            return
        lease = forged(self.leases[index % len(self.leases)], forge)
        now = max(0, lease.deadline + offset)
        extended = self.same(
            f"extend({lease!r}, now={now}, lease_seconds={lease_seconds})",
            lambda q: q.extend(lease, now=now, lease_seconds=lease_seconds),
        )
        if extended is not None:
            self.leases.append(extended)

    def redrive(self, task_id: str, available_at: int, extra_attempts: int) -> None:
        self.same(
            f"redrive({task_id!r}, available_at={available_at}, extra_attempts={extra_attempts})",
            lambda q: q.redrive(task_id, available_at=available_at, extra_attempts=extra_attempts),
        )

    def cancel(self, task_id: str, error: dict[str, str] | None = None, now: int | None = None) -> None:
        self.same(
            f"cancel({task_id!r}, error={error!r:.60}, now={now})", lambda q: q.cancel(task_id, error=error, now=now)
        )

    def set_clock(self, units_per_second: int) -> None:
        self.same(f"set_clock({units_per_second})", lambda q: q.set_clock(units_per_second))

    def held_index(self, pick: int) -> int | None:
        """The index in `leases` of a token that still holds its task (by the model), if any."""
        held = [
            index
            for index, lease in enumerate(self.leases)
            if (task := self.model.get(lease.task_id)) is not None
            and task.status == "leased"
            and (task.worker, task.generation) == (lease.worker, lease.generation)
        ]
        return held[pick % len(held)] if held else None

    def some_task(self, pick: int, fallback: str, status: str | None) -> str:
        """A task id of `status` (any task for None) if there is one, else `fallback`: calls that can succeed."""
        ids = [task.task_id for task in self.model.tasks(status)]
        return ids[pick % len(ids)] if ids else fallback

    def get(self, task_id: str) -> None:
        self.same(f"get({task_id!r})", lambda q: q.get(task_id))

    def tasks(self, status: str | None) -> None:
        self.same(f"tasks({status!r})", lambda q: q.tasks(status))

    def bad_call(self, index: int) -> None:
        self.log.append(f"bad_call[{index}]")
        call = BAD_CALLS[index]
        assert outcome(lambda: call(self.model))[0] == ("error", "bad-argument")
        assert outcome(lambda: call(self.queue))[0] == ("error", "bad-argument")

    def compact(self) -> None:
        self.log.append("compact()")
        self.queue.compact()
        assert self.queue.stats()["wal_bytes"] == 0

    def reopen(self) -> None:
        self.log.append("reopen")
        self.queue.close()
        self.queue = Queue(self.directory, sync=False, compact_bytes=self.compact_bytes)


# ---------------------------------------------------------------------------
# hypothesis: stateful


item_strategy = st.fixed_dictionaries(
    {"task_id": st.sampled_from(TASK_IDS), "payload": st.sampled_from(PAYLOADS)},
    optional={
        "key": st.sampled_from(KEYS),
        "available_at": st.integers(0, 30),
        "max_attempts": st.integers(1, 3),
        "put_at": st.integers(0, 30),  # the producer's time: due from then, never in the identity
    },
)


class QueueVersusModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(compact_bytes=700)

    def teardown(self) -> None:
        self.h.close()

    @rule(
        task_id=st.sampled_from(TASK_IDS),
        payload=st.sampled_from(PAYLOADS),
        key=st.sampled_from(KEYS),
        available_at=st.integers(0, 30),
        max_attempts=st.integers(1, 3),
    )
    def put(self, task_id: str, payload: dict[str, Any], key: str | None, available_at: int, max_attempts: int) -> None:
        self.h.put(task_id, payload, key, available_at, max_attempts)

    @rule(items=st.lists(item_strategy, max_size=4))
    def put_many(self, items: list[dict[str, Any]]) -> None:
        self.h.put_many(items)

    @rule(
        worker=st.sampled_from(WORKERS),
        step=st.integers(-3, 8),
        lease_seconds=st.integers(1, 10),
        limit=st.integers(1, 3),
    )
    def reserve(self, worker: str, step: int, lease_seconds: int, limit: int) -> None:
        self.h.reserve(worker, step, lease_seconds, limit)

    @precondition(lambda self: bool(self.h.leases))
    @rule(
        verb=st.sampled_from(["ack", "release", "release", "fail", "give_back"]),
        index=st.integers(0, 50),
        offset=st.integers(-6, 2),
        forge=st.sampled_from(["none", "none", "none", "worker", "generation", "payload"]),
        delay=st.integers(0, 5),
        error=st.sampled_from(ERRORS),
    )
    def finish(self, verb: str, index: int, offset: int, forge: str, delay: int, error: dict[str, str] | None) -> None:
        self.h.finish(verb, index, offset, forge, delay, error)

    @precondition(lambda self: bool(self.h.leases))
    @rule(
        indexes=st.lists(st.integers(-4, 50), max_size=4),
        offset=st.integers(-6, 2),
        forges=st.lists(st.sampled_from(["none"] * 8 + ["bare", "worker", "generation"]), min_size=4, max_size=4),
    )
    def ack_many(self, indexes: list[int], offset: int, forges: list[str]) -> None:
        self.h.ack_many(indexes, offset, forges)

    @precondition(lambda self: bool(self.h.leases))
    @rule(
        index=st.integers(0, 50),
        offset=st.integers(-6, 2),
        forge=st.sampled_from(["none", "none", "none", "bare", "worker", "generation"]),
        lease_seconds=st.sampled_from([1, 2, 5, 20, 2**63 - 1]),
    )
    def extend(self, index: int, offset: int, forge: str, lease_seconds: int) -> None:
        self.h.extend(index, offset, forge, lease_seconds)

    @rule(
        pick=st.integers(0, 50),
        fallback=st.sampled_from(TASK_IDS + ["never"]),
        dead_only=st.booleans(),
        available_at=st.integers(0, 30),
        extra_attempts=st.sampled_from([1, 1, 2, 2**63 - 2]),
    )
    def redrive(self, pick: int, fallback: str, dead_only: bool, available_at: int, extra_attempts: int) -> None:
        task_id = self.h.some_task(pick, fallback, "dead" if dead_only else None)
        self.h.redrive(task_id, available_at, extra_attempts)

    @rule(
        pick=st.integers(0, 50),
        fallback=st.sampled_from(TASK_IDS + ["never"]),
        status=st.sampled_from(["ready", "leased", None]),
        error=st.sampled_from(ERRORS),
    )
    def cancel(self, pick: int, fallback: str, status: str | None, error: dict[str, str] | None) -> None:
        self.h.cancel(self.h.some_task(pick, fallback, status), error, None if error is None else self.h.now)

    @rule(units_per_second=st.sampled_from([1, 1000, 0]))
    def set_clock(self, units_per_second: int) -> None:
        self.h.set_clock(units_per_second)

    @rule(task_id=st.sampled_from(TASK_IDS + ["never"]))
    def get(self, task_id: str) -> None:
        self.h.get(task_id)

    @rule(status=st.sampled_from([None, *STATUSES]))
    def tasks(self, status: str | None) -> None:
        self.h.tasks(status)

    @rule(index=st.integers(0, len(BAD_CALLS) - 1))
    def bad_call(self, index: int) -> None:
        self.h.bad_call(index)

    @rule()
    def compact(self) -> None:
        self.h.compact()

    @rule()
    def reopen(self) -> None:
        self.h.reopen()

    @invariant()
    def same_state(self) -> None:
        self.h.check()


QueueVersusModel.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueVersusModel = QueueVersusModel.TestCase


# ---------------------------------------------------------------------------
# seeded random programs: longer runs, many automatic compactions


def random_step(h: Harness, rng: random.Random) -> None:
    roll = rng.random()
    if roll < 0.22:
        h.put(
            rng.choice(TASK_IDS + [f"t{rng.randrange(40)}"]),
            rng.choice(PAYLOADS),
            rng.choice(KEYS),
            rng.randrange(0, h.now + 20),
            rng.randint(1, 3),
        )
    elif roll < 0.30:
        items = []
        for _ in range(rng.randrange(5)):
            item: dict[str, Any] = {"task_id": f"t{rng.randrange(40)}", "payload": rng.choice(PAYLOADS)}
            if rng.random() < 0.3:
                item["key"] = f"k{rng.randrange(40)}"
            if rng.random() < 0.5:
                item["available_at"] = rng.randrange(0, h.now + 20)
            if rng.random() < 0.5:
                item["max_attempts"] = rng.randint(1, 4)
            items.append(item)
        h.put_many(items)
    elif roll < 0.55:
        h.reserve(rng.choice(WORKERS), rng.randint(-3, 8), rng.randint(1, 12), rng.randint(1, 4))
    elif roll < 0.72:
        forge = rng.choice(["none"] * 6 + ["worker", "generation", "payload"])
        verb = rng.choice(["ack", "ack", "release", "release", "fail"])
        # Half of the time a token still held, before its deadline: a call that can succeed.
        held = h.held_index(rng.randrange(1000))
        if held is not None and rng.random() < 0.5:
            index, offset = held, -1
        else:
            index, offset = rng.randrange(1000), rng.randint(-8, 1)
        h.finish(verb, index, offset, forge, rng.randint(0, 6), rng.choice(ERRORS))
    elif roll < 0.78:
        forge = rng.choice(["none"] * 6 + ["bare", "worker", "generation"])
        # Mostly one of the newest tokens (the likeliest to be held), before its deadline: a heartbeat.
        index = -1 - rng.randrange(3) if rng.random() < 0.7 else rng.randrange(1000)
        h.extend(index, rng.randint(-4, 1), forge, rng.choice([1, 3, 8, 20]))
    elif roll < 0.81:
        status = rng.choice(["dead", "dead", "dead", None])
        task_id = h.some_task(rng.randrange(1000), rng.choice(TASK_IDS + ["never"]), status)
        h.redrive(task_id, rng.randrange(0, h.now + 10), rng.choice([1, 1, 2]))
    elif roll < 0.84:
        status = rng.choice(["ready", "leased", "leased", None])
        error = rng.choice(ERRORS)
        now = None if error is None and rng.random() < 0.5 else h.now
        h.cancel(h.some_task(rng.randrange(1000), rng.choice(TASK_IDS + ["never"]), status), error, now)
    elif roll < 0.88:
        h.get(rng.choice(TASK_IDS + [f"t{rng.randrange(40)}", "never"]))
    elif roll < 0.91:
        h.tasks(rng.choice([None, *STATUSES]))
    elif roll < 0.94:
        h.bad_call(rng.randrange(len(BAD_CALLS)))
    elif roll < 0.97:
        h.compact()
    else:
        h.reopen()
    h.check()


@pytest.mark.parametrize("seed", range(6))
def test_random_program_gives_identical_answers_and_states(seed: int) -> None:
    rng = random.Random(seed)
    h = Harness(compact_bytes=rng.choice([400, 1500, None]))
    try:
        for _ in range(350):
            random_step(h, rng)
        h.reopen()
        h.check()
        stats = h.queue.stats()
        assert stats["counts"] == h.model.counts()
        # Not vacuous: extend, redrive, cancel and fail succeeded, not only failed, in every seeded program,
        # and a dead letter kept the error it was given.
        assert all(h.succeeded[call] for call in ("extend", "redrive", "cancel", "fail")), h.succeeded
        dead = h.queue.tasks("dead")
        assert any(task.last_error is not None and task.last_error.type != "LeaseExpired" for task in dead)
    finally:
        h.close()


def test_automatic_compaction_actually_happens_in_random_programs() -> None:
    rng = random.Random(1234)
    h = Harness(compact_bytes=300)
    try:
        for _ in range(300):  # no compact(), no reopen: only the trigger compacts
            roll = rng.random()
            if roll < 0.3:
                h.put(f"t{rng.randrange(60)}", rng.choice(PAYLOADS), None, 0, 3)
            elif roll < 0.6:
                h.reserve(rng.choice(WORKERS), 1, rng.randint(1, 5), rng.randint(1, 3))
            else:
                h.finish(rng.choice(["ack", "release"]), rng.randrange(1000), -1, "none", 0)
            h.check()
        assert h.queue.stats()["snapshot_seq"] > 0
    finally:
        h.close()


def test_model_reap_is_the_first_transaction_of_reserve(tmp_path_factory: pytest.TempPathFactory) -> None:
    model = Model()
    model.put_many([{"task_id": f"t{i}", "payload": {}, "max_attempts": 2} for i in range(4)])
    model.reserve("w", now=0, lease_seconds=5, limit=3)
    reaped = model.clone()
    assert reaped.reap(5) == 1 and reaped.last_seq == model.last_seq + 1
    assert reaped.counts() == {"ready": 4, "leased": 0, "completed": 0, "dead": 0}
    assert reaped.reap(5) == 0
    # the crash campaigns rely on this: a crash between a reserve's two frames recovers to `reaped`
    qdir = tmp_path_factory.mktemp("q")
    second_append = {"count": 0}

    def hook(phase: str) -> None:
        if phase == "wal.append.before":
            second_append["count"] += 1
            if second_append["count"] == 4:  # put_many, lease, reap, then the second lease
                raise InjectedCrash(phase)

    q = Queue(qdir, sync=False, hook=hook)
    q.put_many([{"task_id": f"t{i}", "payload": {}, "max_attempts": 2} for i in range(4)])
    q.reserve("w", now=0, lease_seconds=5, limit=3)
    with pytest.raises(InjectedCrash):
        q.reserve("w", now=5, lease_seconds=5)
    with Queue(qdir, sync=False) as again:
        assert view(again) == view(reaped)
    assert render(model.reserve("w", now=5, lease_seconds=5)) == render(reaped.reserve("w", now=5, lease_seconds=5))


def test_the_lease_lifecycle_gives_identical_answers_and_states() -> None:
    """A scripted walk through every rule of extend, redrive and cancel, met even if the random programs miss it."""
    h = Harness(compact_bytes=None)
    try:
        h.put("a", {"v": 1}, None, 0, 1)
        h.put("b", {}, "k1", 4, 2)
        h.check()  # next_available_at 0
        h.reserve("w1", 0, 5, 1)  # a, deadline 5
        token = h.leases[-1]
        h.extend(-1, -5, "none", 2**63 - 1)  # now 0: capped at the end of time
        h.extend(-1, -(2**63) + 1, "bare", 3)  # now 0 again: the three fields are enough; shorter is allowed
        h.check()
        h.same("extend-at-deadline", lambda q: q.extend(token, now=3, lease_seconds=1))  # StaleLease
        h.cancel("a")  # leased -> dead, with its attempt used up (1 of 1)
        h.check()
        for verb in ("ack", "release"):
            h.same(f"{verb}-after-cancel", lambda q, verb=verb: getattr(q, verb)(token, now=1))
        h.same("extend-after-cancel", lambda q: q.extend(token, now=1, lease_seconds=1))
        h.cancel("a")  # dead already: WrongStatus
        h.redrive("b", 0, 1)  # ready: WrongStatus
        h.redrive("never", 0, 1)  # unknown: WrongStatus
        h.same("redrive-overflow", lambda q: q.redrive("a", available_at=0, extra_attempts=2**63 - 1))
        h.redrive("a", 7, 2)  # ready at 7, max_attempts 3
        h.check()
        h.put("a", {"v": 1}, None, 0, 1)  # the original put: an identical retry
        h.put("a", {"v": 2}, None, 0, 1)  # KeyConflict
        h.reserve("w2", 7, 5, 2)  # a (generation 2) and b
        h.same("stale-across-redrive", lambda q: q.ack(token, now=8))
        h.cancel("b")  # leased -> dead with attempts left
        h.check()
        h.redrive("b", 0, 1)
        h.reopen()
        h.check()
        assert h.succeeded["extend"] == 2 and h.succeeded["redrive"] == 2 and h.succeeded["cancel"] == 2
        assert h.queue.get("a") is not None and h.queue.get("a").generation == 2  # type: ignore[union-attr]
    finally:
        h.close()
