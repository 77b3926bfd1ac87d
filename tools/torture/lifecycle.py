"""The forced lifecycle: a fixed run of calls, on tasks in a queue of their own, at the start of a campaign's work.

A seeded workload reaches every kind of call sooner or later (seed 1's
first `fail` in crash-points came around step 460); a bounded run on a
slow machine may stop before then, with nothing wrong but a count short of
its target. So the first unit of a campaign that must cover every kind
starts with this run instead: every lease lifecycle call (extend, cancel
and fail with their errors, redrive, release with an error, give_back,
ack_many, configure), an expiry (a reserve past a lease's deadline), an
ack and a compaction, in about twenty steps, however slow the machine.

The tasks are in `QUEUE`, leased by `WORKER`: no workload's configure op
names that queue (workload.LANE_QUEUES) and no workload reserves as that
worker, so each step finds the task it expects. A step is chosen from the
model's state, so a campaign that goes on from a copy holding the same
state (a crash after every frame of the step was written) stays in step.
"""

from __future__ import annotations

from typing import Any

from model import Model

from .workload import Op, Workload, token_for

WORKER = "w-lifecycle"
QUEUE = "lifecycle"
ERRORS = (
    {"type": "Cancelled", "message": "by the operator"},
    {"type": "KeyError", "message": "no 'resize'"},
    {"type": "TimeoutError", "message": "smtp: 421 try later"},
)
LEASE = 10
#: The steps in order. The bytes campaign's stores take the first `SHORT` (a small store is a thorough one).
STEPS = (
    ("put", "reserve", "extend", "cancel", "redrive", "reserve", "fail")
    + ("redrive", "reserve", "release", "reserve", "give_back", "reserve", "ack_many")
    + ("configure", "put", "reserve", "expire", "ack", "compact")
)
SHORT = 7


class Opening:
    """`workload`'s calls, the first `steps` of the forced lifecycle before them (0: none, as in a later unit).

    `target` of `next_op` is a `Model` or a `Queue` (they share the API): a
    child process and its parent build the same calls from the same state.
    """

    def __init__(self, workload: Workload, steps: int = len(STEPS)) -> None:
        self.workload = workload
        self.steps = steps
        self.given = 0

    @property
    def done(self) -> bool:
        """Whether every step of the lifecycle has been given (the next call is the workload's)."""
        return self.given >= self.steps

    def next_op(self, target: Any) -> Op:
        if self.done:
            return self.workload.next_op(target)
        self.given += 1
        return lifecycle_op(self.given - 1, self.workload, target)


def first_unit(workload: Workload, unit: int) -> Opening:
    """`workload`, opening with the whole forced lifecycle in unit 0 and with none in the others."""
    return Opening(workload, len(STEPS) if unit == 0 else 0)


def lifecycle_op(step: int, workload: Workload, model: Model | Any) -> Op:
    """The call of step `step` (an index into `STEPS`), chosen from `model`'s state; `workload` gives ids and times."""
    kind, now = STEPS[step], workload.now
    if kind == "put":  # available at once, three attempts: the expiry below leaves it one to be leased again
        spec: dict[str, Any] = {**workload.new_spec(), "available_at": 0, "queue": QUEUE, "priority": 0}
        spec.pop("put_at", None)
        return Op("put", {"spec": {**spec, "max_attempts": 3}})
    if kind in ("reserve", "expire"):
        if kind == "expire":  # the clock reaches the lease's deadline: the reserve reaps it, then leases it again
            workload.now = now = max(now, _leased(model).deadline or now)
        return Op("reserve", {"worker": WORKER, "now": now, "lease_seconds": LEASE, "limit": 1, "queues": [QUEUE]})
    if kind == "redrive":
        [dead] = [task for task in model.tasks("dead") if task.queue == QUEUE]
        return Op("redrive", {"task_id": dead.task_id, "available_at": now, "extra_attempts": 2})
    if kind == "configure":
        return Op("configure", {"queue": QUEUE, "settings": {"concurrency": 2, "paused": False}})
    if kind == "compact":
        return Op("compact", {})
    lease = token_for(_leased(model))
    if kind == "extend":
        return Op("extend", {"lease": lease, "now": now, "lease_seconds": 2 * LEASE})
    if kind == "cancel":
        return Op("cancel", {"task_id": lease.task_id, "error": ERRORS[0], "now": now})
    if kind == "fail":
        return Op("fail", {"lease": lease, "now": now, "error": ERRORS[1]})
    if kind == "release":
        return Op("release", {"lease": lease, "now": now, "delay": 0, "error": ERRORS[2]})
    if kind == "ack_many":
        return Op("ack_many", {"leases": [lease], "now": now})
    return Op(kind, {"lease": lease, "now": now})  # ack, give_back


def _leased(model: Model) -> Any:
    """The one task `WORKER` holds (each lease of the run is settled before the next is taken)."""
    [task] = [task for task in model.tasks("leased") if task.worker == WORKER]
    return task
