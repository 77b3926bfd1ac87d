"""`complete`: a task's ack, its result and its follow-up puts, planned as ONE transaction (pure, no I/O).

Why one call: a handler that puts its next step and then acks can crash in
between, running the step twice or losing it (the outbox problem). Here
the result op, the ack and the puts are one frame: all of them are
written, or none (a stale lease writes nothing at all). The puts are
judged as `put_many` judges them: an identical retry of one is left out,
a conflict refuses the whole call.

The result op (`result`, declared in `state.OP_KINDS`) comes just before
the ack of the same lease, and is refused anywhere else: a result exists
only for a completed task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from walqueue.engine import ops
from walqueue.engine.ops import Plan
from walqueue.engine.optable import Op
from walqueue.engine.state import OP_KINDS, State
from walqueue.engine.types import Lease, plain_lease
from walqueue.engine.validate import MAX_INT, check_int, check_name, check_result

__all__ = ["DEFAULT_RESULT_TTL", "CompleteArgs", "check_result_args", "complete_args", "plan_complete"]

#: How long a result is kept when the caller does not say, in the units of `now` (a day in milliseconds).
DEFAULT_RESULT_TTL = 86_400_000

_RESULT = OP_KINDS["result"]


class _EncodedResult:
    """A result as `complete_args` checked it: its canonical JSON (`apply` reads it only in a `Plan`'s ops)."""

    __slots__ = ("canonical",)

    def __init__(self, canonical: bytes) -> None:
        self.canonical = canonical


class CompleteArgs:
    """`complete`'s arguments, checked before any lock: the token, now, the encoded result, its TTL, the put ops."""

    __slots__ = ("lease", "now", "result", "ttl", "puts")

    def __init__(self, lease: Lease, now: int, result: _EncodedResult | None, ttl: int, puts: list[Op]) -> None:
        self.lease, self.now, self.result, self.ttl, self.puts = lease, now, result, ttl, puts


def complete_args(lease: object, now: object, result: Any, result_ttl: object, puts: object) -> CompleteArgs:
    """Check `Queue.complete`'s arguments in its order; `TypeError`/`ValueError` names the first flaw."""
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, not {type(lease).__name__}")
    token = plain_lease(lease)
    checked_now = check_int(now, "now")
    ttl = check_int(result_ttl, "result_ttl", 1)
    if checked_now + ttl > MAX_INT:
        raise ValueError(f"now + result_ttl exceeds {MAX_INT}")
    encoded = None if result is None else _EncodedResult(check_result(result))
    if isinstance(puts, (str, bytes, Mapping)) or not isinstance(puts, Iterable):
        raise TypeError("puts must be an iterable of put mappings (as put_many takes them)")
    put_ops = ops.put_ops_from_mappings(puts)
    return CompleteArgs(token, checked_now, encoded, ttl, put_ops)


def check_result_args(task_id: object, now: object) -> None:
    """`Queue.result`'s arguments: a storable task id, and `now` None or a time."""
    check_name(task_id, "task_id")
    if now is not None:
        check_int(now, "now")


def plan_complete(state: State, args: CompleteArgs) -> Plan:
    """The result op (if any), the ack, and the new puts, for one transaction; `StaleLease`/`KeyConflict`: none."""
    ack = ops.plan_ack(state, args.lease, args.now)
    planned: list[Op] = []
    encoded: list[bytes] = []
    if args.result is not None:
        ack_op = ack.ops[0]
        op: Op = {
            "op": "result",
            "task": ack_op["task"],
            "generation": ack_op["generation"],
            "at": args.now,
            "expires": args.now + args.ttl,
            "value": args.result,
        }
        planned.append(op)
        encoded.append(_RESULT.encode(op))
    planned += ack.ops
    encoded += ack.op_json
    if args.puts:
        puts, _ = ops.plan_puts(state, args.puts)
        planned += puts.ops
        encoded += puts.op_json
    return Plan(planned, encoded)
