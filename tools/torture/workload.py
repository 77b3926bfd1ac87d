"""Operations and the seeded workload shared by the model-checked campaigns."""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import Dirs, seeded

from model import Model, render
from walqueue import (
    InjectedCrash,
    Lease,
    Task,
)

from .harness import DOCUMENTED_ERRORS, Report


@dataclass(frozen=True)
class Op:
    """One call of the public API, as data, so that a child process and its parent build the same."""

    kind: str
    args: dict[str, Any]

    def describe(self) -> str:
        """A one-line text that identifies the call (the kill campaign compares it across processes)."""
        a = self.args
        if self.kind == "put":
            spec = a["spec"]
            return f"put {spec['task_id']} key={spec.get('key')} at={spec.get('available_at', 0)}"
        if self.kind == "put_many":
            return "put_many " + ",".join(item["task_id"] for item in a["items"])
        if self.kind == "reserve":
            lanes = "" if a.get("queues") is None else f" queues={','.join(a['queues'])}"
            return f"reserve {a['worker']} now={a['now']} for={a['lease_seconds']} limit={a['limit']}{lanes}"
        if self.kind == "configure":
            return f"configure {a['queue']} {sorted(a['settings'].items())}"
        if self.kind in ("ack", "release", "extend", "fail", "give_back"):
            lease = a["lease"]
            text = f"{self.kind} {lease.task_id} {lease.worker} g{lease.generation} now={a['now']}"
            return text + error_tag(a.get("error"))
        if self.kind == "redrive":
            return f"redrive {a['task_id']} at={a['available_at']} extra={a['extra_attempts']}"
        if self.kind == "cancel":
            return (
                f"cancel {a['task_id']}"
                + ("" if a.get("now") is None else f" now={a['now']}")
                + error_tag(a.get("error"))
            )
        if self.kind == "get":
            return f"get {a['task_id']}"
        if self.kind == "tasks":
            return f"tasks {a['status']}"
        return self.kind


def error_tag(error: dict[str, str] | None) -> str:
    """A short, ASCII, one-line tag of a call's error argument (its message may be long or hold a lone surrogate)."""
    if error is None:
        return ""
    exact = repr(sorted(error.items())).encode("ascii", "backslashreplace")
    return f" error={hashlib.sha256(exact).hexdigest()[:12]}"


def _given(a: dict[str, Any], *names: str) -> dict[str, Any]:
    """The optional keyword arguments `names` of a call (`error=`, cancel's `now=`): passed only when given."""
    return {name: a[name] for name in names if a.get(name) is not None}


def perform(op: Op, target: Any) -> Any:
    """Run `op` on a `Queue` or a `Model` (they share the API)."""
    a = op.args
    if op.kind == "put":
        return target.put(**copy.deepcopy(a["spec"]))
    if op.kind == "put_many":
        return target.put_many(copy.deepcopy(a["items"]))
    if op.kind == "reserve":
        lanes = _given(a, "queues")
        return target.reserve(a["worker"], now=a["now"], lease_seconds=a["lease_seconds"], limit=a["limit"], **lanes)
    if op.kind == "configure":
        return target.configure_queue(a["queue"], **copy.deepcopy(a["settings"]))
    if op.kind == "ack":
        return target.ack(a["lease"], now=a["now"])
    if op.kind == "ack_many":
        return target.ack_many(a["leases"], now=a["now"])
    if op.kind == "release":
        return target.release(a["lease"], now=a["now"], delay=a["delay"], **_given(a, "error"))
    if op.kind == "fail":
        return target.fail(a["lease"], now=a["now"], **_given(a, "error"))
    if op.kind == "give_back":
        return target.give_back(a["lease"], now=a["now"])
    if op.kind == "extend":
        return target.extend(a["lease"], now=a["now"], lease_seconds=a["lease_seconds"])
    if op.kind == "redrive":
        return target.redrive(a["task_id"], available_at=a["available_at"], extra_attempts=a["extra_attempts"])
    if op.kind == "cancel":
        return target.cancel(a["task_id"], **_given(a, "error", "now"))
    if op.kind == "compact":
        return target.compact()
    if op.kind == "get":
        return target.get(a["task_id"])
    if op.kind == "tasks":
        return target.tasks(a["status"])
    raise AssertionError(f"unknown op kind {op.kind}")


def outcome(op: Op, target: Any) -> str:
    """The call's answer as exact text: the rendered result, or the documented error's class."""
    try:
        value = perform(op, target)
    except DOCUMENTED_ERRORS as exc:
        return "error " + type(exc).__name__
    return "ok " + render(value)


#: The lease lifecycle op kinds, and `ack_many`, counted apart in every campaign's report so that a run shows it
#: applied them.
LIFECYCLE_KINDS = ("extend", "redrive", "cancel", "fail", "ack_many", "give_back", "configure")


def count_lifecycle_call(report: Report, op: Op, answer: str, what: str) -> None:
    """Count a lifecycle call that succeeded (`answer` from `outcome`), as "`what` `kind`".

    A successful call that recorded a last error (`release`, `fail` or
    `cancel` given ``error=``) is counted once more, as "`what` error".
    """
    if not answer.startswith("ok "):
        return
    if op.kind in LIFECYCLE_KINDS:
        report.count(f"{what} {op.kind}")
    if op.args.get("error") is not None:
        report.count(f"{what} error")


#: The calls that take ``error=``: a workload records errors on those its target takes it on.
ERROR_CALLS = ("release", "fail", "cancel")
#: The errors a workload records: mostly short; some cut by the engine (a type over 256 UTF-8
#: bytes, a message over 2,048), one exactly at the bound, some with a lone surrogate (escaped).
ERROR_TYPES = ("ValueError", "TimeoutError", "KeyError", "Permanent", "错误", "LeaseLost\ud800", "T" * 300)
ERROR_MESSAGES = (
    "", "bad input", "smtp: 421 try later", "line one\nline two", 'a "quote" and a \\ backslash',
    "lone \udcff surrogate", "m" * 2048, "é" * 1500, "x" * 5000,
)  # fmt: skip
ERROR_TYPE_WEIGHTS = (6, 4, 3, 2, 1, 1, 1)
ERROR_MESSAGE_WEIGHTS = (2, 6, 4, 2, 2, 1, 1, 1, 1)


def seeded_error(rng: random.Random) -> dict[str, str]:
    """An error argument drawn from `rng`: a deterministic function of its state."""
    kind = rng.choices(ERROR_TYPES, weights=ERROR_TYPE_WEIGHTS)[0]
    return {"type": kind, "message": rng.choices(ERROR_MESSAGES, weights=ERROR_MESSAGE_WEIGHTS)[0]}


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def token_for(task: Task) -> Lease:
    """The lease token a worker would hold for a leased task (also used to forge stale ones)."""
    return Lease(
        task_id=task.task_id,
        worker=task.worker or "w1",
        generation=task.generation,
        deadline=task.deadline or 0,
        attempts=task.attempts,
        payload=task.payload or {},
    )


class Workload:
    """A seeded stream of calls that depends only on its seed and on the state it reads.

    Tokens are rebuilt from `tasks()` rather than remembered, so a child
    process reading its queue and a parent reading the model make the same
    choices as long as the two states agree, and a workload can go on from a
    crashed copy whose last answer nobody saw.
    """

    KINDS = (
        ("put", "retry", "conflict", "put_many", "reserve", "ack", "release", "stale", "compact", "get", "tasks")
        + ("extend", "redrive", "cancel", "fail")  # the lease lifecycle
        + ("ack_many",)
        + ("give_back",)  # an unstarted lease undone
        + ("configure",)  # lanes: a queue's concurrency, rate and pause
    )
    WEIGHTS = (6, 1, 1, 2, 5, 4, 2, 1, 1, 1, 1) + (3, 2, 1, 2) + (2,) + (1,) + (1,)
    #: How often a release, and a cancel, records an error (when the workload records errors at all).
    ERROR_PROBABILITY = 0.5

    def __init__(
        self,
        seed: str,
        *,
        prefix: str = "t",
        now: int = 0,
        weights: dict[str, int] | None = None,
        errors: Collection[str] = ERROR_CALLS,
    ) -> None:
        """`errors`: the calls of `ERROR_CALLS` the target takes ``error=`` on (without "fail": no `fail` at all)."""
        self.rng = random.Random(seed)
        #: Put times are drawn apart, so that stamping leaves every other choice of a seed as it was.
        self.stamps = random.Random(f"{seed}:put times")
        self.prefix = prefix
        self.now = now
        self.next_id = 0
        self.puts: list[dict[str, Any]] = []
        self.errors = frozenset(errors)
        self.weights = list(self.WEIGHTS)
        for kind, weight in ({**(weights or {}), **({} if "fail" in self.errors else {"fail": 0})}).items():
            self.weights[self.KINDS.index(kind)] = weight

    def _maybe_error(self, call: str) -> dict[str, str] | None:
        """None, or (when `call` takes an error here) a seeded error half of the time."""
        if call not in self.errors or self.rng.random() >= self.ERROR_PROBABILITY:
            return None
        return seeded_error(self.rng)

    def _payload(self, n: int) -> dict[str, Any]:
        rng = self.rng
        payload: dict[str, Any] = {"n": n}
        shape = rng.random()
        if shape < 0.5:
            payload["blob"] = "x" * rng.randrange(0, 40)
        elif shape < 0.7:
            payload["f"] = rng.choice([1.5, -0.0, 1e300, 0.1, 2.0])
            payload["b"] = rng.choice([True, False, None, 1])
        elif shape < 0.85:
            payload["nested"] = {"l": [1, "two", {"three": [3.0]}], "u": 'é\u2028\x00"\\'}
        else:
            payload["big"] = rng.randrange(2**62)
        return payload

    def new_spec(self) -> dict[str, Any]:
        rng = self.rng
        self.next_id += 1
        spec: dict[str, Any] = {
            "task_id": f"{self.prefix}{self.next_id:04d}",
            "payload": self._payload(self.next_id),
            "available_at": self.now + rng.choice([0, 0, 0, 3]),
            "max_attempts": rng.choice([1, 2, 3]),
        }
        if rng.random() < 0.3:
            spec["key"] = f"k-{self.prefix}{self.next_id:04d}"
        if self.weights[self.KINDS.index("configure")] and rng.random() < 0.4:  # lanes
            spec["queue"] = rng.choice(LANE_QUEUES)
            spec["priority"] = rng.choice([0, 1, 5, -2])
        if self.now and self.stamps.random() < 0.25:  # a stamped put (DECISIONS §46): put now, due from then
            spec["put_at"] = self.now
        self.puts.append(spec)
        return spec

    def next_op(self, target: Any) -> Op:
        """Choose the next call from the seed and from `target`'s state (a Queue or a Model)."""
        rng = self.rng
        self.now += rng.choice([0, 1, 1, 2, 5])
        kind = rng.choices(self.KINDS, weights=self.weights)[0]
        chooser = self._CHOOSERS.get(kind)
        op = None if chooser is None else chooser(self, kind, target, self.now)
        return op if op is not None else Op("put", {"spec": self.new_spec()})

    def _repeat_put(self, kind: str, target: Any, now: int) -> Op | None:
        if not self.puts:
            return None
        spec = dict(self.rng.choice(self.puts))
        if kind == "conflict":
            spec["payload"] = {"other": self.rng.randrange(3)}
        elif "put_at" in spec:  # a retry stamped later is still identical
            spec["put_at"] = now + 1
        return Op("put", {"spec": spec})

    def _put_many(self, kind: str, target: Any, now: int) -> Op | None:
        rng = self.rng
        items = [self.new_spec() for _ in range(rng.randrange(1, 4))]
        if len(self.puts) > len(items) and rng.random() < 0.4:
            items.append(dict(rng.choice(self.puts[: -len(items)])))
        return Op("put_many", {"items": items})

    def _reserve(self, kind: str, target: Any, now: int) -> Op | None:
        rng = self.rng
        return Op(
            "reserve",
            {
                "worker": rng.choice(["w1", "w2", "w3"]),
                "now": now,
                "lease_seconds": rng.choice([1, 2, 4, 10]),
                "limit": rng.choice([1, 2, 3, 5]),
                **(
                    {"queues": rng.choice([["mail"], ["bulk", "default"]])}
                    if self.weights[self.KINDS.index("configure")] and rng.random() < 0.2
                    else {}
                ),
            },
        )

    def _configure(self, kind: str, target: Any, now: int) -> Op | None:
        """A queue's settings changed: a limit set or cleared, a pause or a resume (mostly a resume)."""
        rng = self.rng
        settings: dict[str, Any] = {}
        if rng.random() < 0.5:
            settings["concurrency"] = rng.choice([None, 1, 2])
        if rng.random() < 0.5:
            settings["rate"] = rng.choice([None, [2, 5], [1, 3]])
        if rng.random() < 0.5:
            settings["paused"] = rng.random() < 0.3
        return Op("configure", {"queue": rng.choice(LANE_QUEUES), "settings": settings})

    def _settle(self, kind: str, target: Any, now: int) -> Op | None:
        leased = target.tasks("leased")
        if not leased:
            return None
        lease = token_for(self.rng.choice(leased))
        if kind in ("ack", "give_back"):
            return Op(kind, {"lease": lease, "now": now})
        if kind == "fail":  # a permanent failure: mostly with its error, sometimes without one
            error = seeded_error(self.rng) if self.rng.random() < 0.8 else None
            return Op("fail", {"lease": lease, "now": now, "error": error})
        delay = self.rng.choice([0, 1, 3])
        return Op("release", {"lease": lease, "now": now, "delay": delay, "error": self._maybe_error("release")})

    def _settle_many(self, kind: str, target: Any, now: int) -> Op | None:
        """Several leases acked in one call; sometimes one of them stale or listed twice (then none is acked)."""
        rng = self.rng
        leased = target.tasks("leased")
        if not leased:
            return None
        leases = [token_for(task) for task in rng.sample(leased, rng.randint(1, min(4, len(leased))))]
        spoil = rng.random()
        if spoil < 0.1:
            leases.append(leases[0])  # listed twice
        elif spoil < 0.2:
            stale = leases[-1]
            leases[-1] = Lease(stale.task_id, stale.worker, stale.generation + 1)  # a generation never granted
        return Op("ack_many", {"leases": leases, "now": now})

    def _extend(self, kind: str, target: Any, now: int) -> Op | None:
        rng = self.rng
        leased = target.tasks("leased")
        if not leased:
            return None
        # Mostly a heartbeat of a lease not yet over; sometimes one at or past its deadline (stale).
        live = [t for t in leased if t.deadline is not None and t.deadline > now]
        task = rng.choice(live if live and rng.random() < 0.85 else leased)
        lease = token_for(task)
        if rng.random() < 0.3:
            lease = Lease(lease.task_id, lease.worker, lease.generation)  # the three fields alone
        return Op("extend", {"lease": lease, "now": now, "lease_seconds": rng.choice([1, 2, 4, 10])})

    def _redrive_or_cancel(self, kind: str, target: Any, now: int) -> Op | None:
        rng = self.rng
        tasks = target.tasks()
        wanted = ("dead",) if kind == "redrive" else ("ready", "leased")
        fitting = [t.task_id for t in tasks if t.status in wanted]
        if not (fitting or tasks):
            return None
        # Mostly a task in the status the call needs; sometimes any task or an unknown one (WrongStatus).
        roll = rng.random()
        if fitting and roll < 0.8:
            task_id = rng.choice(fitting)
        elif tasks and roll < 0.95:
            task_id = rng.choice(tasks).task_id
        else:
            task_id = f"{self.prefix}missing"
        if kind == "cancel":
            # With a reason (and the time it needs); or `now` alone, which is checked and unused; or neither.
            error = self._maybe_error("cancel")
            when = now if error is not None or ("cancel" in self.errors and rng.random() < 0.3) else None
            return Op("cancel", {"task_id": task_id, "error": error, "now": when})
        return Op(
            "redrive",
            {
                "task_id": task_id,
                "available_at": now + rng.choice([0, 0, 2]),
                "extra_attempts": rng.choice([1, 1, 2]),
            },
        )

    def _stale(self, kind: str, target: Any, now: int) -> Op | None:
        rng = self.rng
        touched = [t for t in target.tasks() if t.generation > 0]
        if not touched:
            return None
        lease = token_for(rng.choice(touched))
        forged = rng.choice(["generation", "worker", "as-is"])
        if forged == "generation":
            lease = Lease(lease.task_id, lease.worker, lease.generation - 1, 0, 0, {})
        elif forged == "worker":
            lease = Lease(lease.task_id, "w9", lease.generation, 0, 0, {})
        # Forged for every lease call this workload makes (a weight of 0 turns extend, or fail, off).
        verbs = ["ack", "release"] + [
            verb for verb in ("extend", "fail", "give_back") if self.weights[self.KINDS.index(verb)]
        ]
        verb = rng.choice(verbs)
        error = self._maybe_error(verb) if verb in ("release", "fail") else None
        return Op(verb, {"lease": lease, "now": now, "delay": 0, "lease_seconds": 5, "error": error})

    def _read_or_compact(self, kind: str, target: Any, now: int) -> Op | None:
        rng = self.rng
        if kind == "compact":
            return Op("compact", {})
        if kind == "get":
            known = [t.task_id for t in target.tasks()]
            task_id = rng.choice(known) if known and rng.random() < 0.8 else f"{self.prefix}missing"
            return Op("get", {"task_id": task_id})
        return Op("tasks", {"status": rng.choice([None, "ready", "leased", "completed", "dead"])})

    #: The chooser of each kind of call; a kind without one (or whose chooser finds nothing to do) is a new put.
    _CHOOSERS: dict[str, Callable[[Workload, str, Any, int], Op | None]] = {
        "retry": _repeat_put,
        "conflict": _repeat_put,
        "put_many": _put_many,
        "reserve": _reserve,
        "ack": _settle,
        "release": _settle,
        "fail": _settle,
        "give_back": _settle,
        "ack_many": _settle_many,
        "extend": _extend,
        "redrive": _redrive_or_cancel,
        "cancel": _redrive_or_cancel,
        "stale": _stale,
        "compact": _read_or_compact,
        "get": _read_or_compact,
        "tasks": _read_or_compact,
        "configure": _configure,
    }


#: The queues a workload puts tasks in, besides the default (lanes).
LANE_QUEUES = ("default", "mail", "bulk")


def reap_only(model: Model, now: int) -> Model:
    """The model after the reap transaction of `reserve(now=now)` and before its lease transaction."""
    reaped = model.clone()
    reaped.reap(now)
    return reaped


@dataclass
class Expected:
    """The model states a step may leave, by `last_seq`, and the answer it must give."""

    by_seq: dict[int, Model]
    before: Model
    after: Model
    answer: str

    def state_after(self, complete: int) -> Model | None:
        """The state once `complete` of the step's transactions are durable (None: no such state)."""
        return self.by_seq.get(self.before.last_seq + complete)


def expected_states(model: Model, op: Op) -> Expected:
    before = model.clone()
    by_seq = {before.last_seq: before}
    if op.kind == "reserve":
        reaped = reap_only(model, op.args["now"])
        by_seq.setdefault(reaped.last_seq, reaped)
    after = model.clone()
    answer = outcome(op, after)
    by_seq[after.last_seq] = after
    return Expected(by_seq, before, after, answer)


class PhaseLog:
    """A hook that records phases and raises `InjectedCrash` at call number `crash_at`, or at `crash_phase`."""

    def __init__(self, crash_at: int | None = None, crash_phase: str | None = None) -> None:
        self.crash_at = crash_at
        self.crash_phase = crash_phase
        self.phases: list[str] = []

    def __call__(self, phase: str) -> None:
        self.phases.append(phase)
        if self.crash_at is not None and len(self.phases) - 1 == self.crash_at:
            raise InjectedCrash(phase)
        if self.crash_phase == phase:
            self.crash_phase = None
            raise InjectedCrash(phase)


def unit_start(campaign: str, seed: int, unit: int, dirs: Dirs) -> tuple[random.Random, Workload, Path]:
    """A unit's seeded random stream, its seeded workload, and its main store directory (under a new `dirs.root`)."""
    dirs.root.mkdir()
    return seeded(campaign, seed, unit), Workload(f"{campaign}-ops:{seed}:{unit}"), dirs.new()
