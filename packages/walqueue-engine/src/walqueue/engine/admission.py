"""Admitting an op: `stage`, the one place that checks an op against the state before its transition runs.

`state.apply` stages every op of a transaction here, against the state as the transaction's earlier ops would
leave it (`transitions.Staging`), and commits only once all are admitted: an op of a known kind, with its kind's
exact keys, on a task of a status its kind starts from, through its transition (transitions.py). `stage_new_puts`
is the same admission for `ops.plan_puts`' new tasks. Nothing here changes a `State`.
"""

from __future__ import annotations

from collections.abc import Collection
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple, Protocol

from walqueue.engine.opkinds import OP_KINDS
from walqueue.engine.optable import CARRIER_SEPARATOR, Op
from walqueue.engine.records import InvalidTransaction
from walqueue.engine.rows import COMPLETED, KEY, STATUS, Stored, new_ready_rows
from walqueue.engine.transitions import OpError, Staging, StateReads, Transition, put
from walqueue.engine.validate import check_name

__all__ = ["Setting", "StateAdmits", "describe_value", "stage", "stage_new_puts"]


class StateAdmits(StateReads, Protocol):
    """What admitting an op reads of the state: the transitions' reads, the tasks, and `State.all_new`."""

    @property
    def tasks(self) -> dict[str, Stored]: ...

    def all_new(self, task_ids: Collection[str], keys: Collection[str]) -> bool: ...


def describe_value(value: object) -> str:
    """A short repr that never fails (a huge int's repr can raise) and never floods a message."""
    if type(value) is int and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    return f"{value!r:.80}"


class Setting(NamedTuple):
    """A store-level op's result (a "clock" op): the setting and its value, applied with the commit."""

    name: str
    value: int


def stage(state: StateAdmits, staging: Staging, seq: int, index: int, op: object) -> Stored | Setting:
    """The record op `index` of transaction `seq` leads to, or `InvalidTransaction`.

    The one place that admits an op. An op a planner made (`staging.planned`)
    skips only the field checks its planner already made; its keys, its
    task's status and every rule of its transition are checked all the same.
    """
    if type(op) is not dict:
        raise InvalidTransaction(f"transaction {seq} op {index}: an op must be a dict, not {type(op).__name__}")
    name = op.get("op")
    kind = OP_KINDS.get(name) if type(name) is str else None
    if kind is None:
        raise InvalidTransaction(f"transaction {seq} op {index}: unknown op {describe_value(name)}")
    if op.keys() != kind.keys and not (kind.optional and kind.keys <= op.keys() <= kind.all_keys):
        wanted = sorted(kind.keys)
        if kind.optional:
            wanted.append(f"(and {', '.join(sorted(kind.all_keys - kind.keys))}, if any)")
        raise InvalidTransaction(
            f"transaction {seq} op {index} ({name}): keys must be exactly {wanted}, not {sorted(map(repr, op))}"
        )
    if kind.subject[0] != "task":
        raise InvalidTransaction(f"transaction {seq} op {index} ({name}): a {name} op stands alone in its transaction")
    try:
        if kind.store:  # a store-level op: its transition returns (setting, value), applied with the commit
            if not staging.planned:
                kind.check_fields(op)
            setting: tuple[str, int] = kind.transition(state, staging, None, op)
            return Setting(*setting)
        task_id = op["task"]
        statuses = kind.statuses
        if statuses is None:  # the op creates its task
            if not staging.planned:
                check_name(task_id, "task")
            if task_id in state.tasks or task_id in staging.records:
                raise OpError(f"task {task_id!r:.100} already exists")
            if not staging.planned:
                kind.check_fields(op)
            record = None
        else:
            if type(task_id) is not str:
                raise OpError(f"task must be a str, not {type(task_id).__name__}")
            record = staging.records.get(task_id)
            if record is None:
                record = state.tasks.get(task_id)
            if record is None:
                raise OpError(f"unknown task {task_id!r:.100}")
            if not staging.planned:  # a flawed field is named before a wrong status
                kind.check_fields(op)
            status = COMPLETED if type(record) is bytes else record[STATUS]
            if status not in statuses:
                raise OpError(f"task {task_id!r:.100} is {status}, not {' or '.join(sorted(statuses))}")
        transition: Transition = kind.transition
        return transition(state, staging, record, op)  # type: ignore[arg-type]  # (a row: no kind takes a completed task)
    except (OpError, TypeError, ValueError) as exc:  # a check's TypeError/ValueError names the field
        raise InvalidTransaction(f"transaction {seq} op {index} ({name}): {exc}") from None


def stage_new_puts(state: StateAdmits, staging: Staging, seq: int, ops: list[Op]) -> None:
    """Stage the puts that `ops.plan_puts` judged new against this very state (`state.apply`'s `_fresh_puts`).

    Their shape is `put_op`'s by construction (the planner takes no other op), so `stage`'s admission of each
    op's type, kind, keys and status is not made again; what depends on the state is checked as it checks it:
    the task id is unknown (in `tasks`, then in this transaction), and `put` checks the key. A refusal is
    `InvalidTransaction` naming the transaction and the op, as `stage`'s, with nothing staged committed.

    The usual batch is checked whole, at C speed, and its rows built column-wise (`rows.new_ready_rows`): every
    op in the default lane without a put time (put's six keys alone), task ids and keys distinct, and none of
    them known to the state (`State.all_new`, which also says no key is owned). That is each op's verdict in the
    loop below, where any other batch goes, and where a refusal is found and named.
    """
    staged, keys, tasks = staging.records, staging.keys, state.tasks
    task_ids, op_keys, count = list(map(_TASK, ops)), list(map(_KEY, ops)), len(ops)
    if not staged and {*map(len, ops)} == {6} and state.all_new(task_ids, op_keys):  # (6 keys: the default lane)
        data = map(_DATA, map(bytes.partition, map(_PAYLOAD, ops), repeat(CARRIER_SEPARATOR, count)))  # (putops.py)
        rows = new_ready_rows(task_ids, op_keys, data, list(map(_AVAILABLE_AT, ops)), map(_MAX_ATTEMPTS, ops))
        staged.update(zip(task_ids, rows, strict=True))
        keys.update(op_keys)
        return
    for index, op in enumerate(ops):
        task_id = op["task"]
        try:
            if task_id in tasks or task_id in staged:
                raise OpError(f"task {task_id!r:.100} already exists")
            staged[task_id] = row = put(state, staging, None, op)
        except OpError as exc:
            raise InvalidTransaction(f"transaction {seq} op {index} (put): {exc}") from None
        keys.add(row[KEY])  # type: ignore[arg-type]  # (a put's record is a row)


_TASK, _KEY, _PAYLOAD, _AVAILABLE_AT, _MAX_ATTEMPTS = map(
    itemgetter, ("task", "key", "payload", "available_at", "max_attempts")
)
_DATA = itemgetter(2)  # a carrier's partition: (op JSON, separator, the row's data)
