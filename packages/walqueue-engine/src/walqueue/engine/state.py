"""The queue's state machine: the state and `apply`, the only transitions.

Everything that changes a task goes through this file (the transitions
themselves, what each kind does to its record, are transitions.py; the
table of op kinds, which `apply` dispatches on, is opkinds.py), and
neither knows files, clocks, threads or hooks. Live operations and recovery both call the
same `apply(state, transaction)`, so a transaction means exactly the same
thing whether it was just written or is being replayed years later. The
shapes of a stored task are in records.py; building a state from a
snapshot's records is snapshot_load.py.

`OP_KINDS` and `OP_KEYS` are importable from here too (most importers name
this module); `apply` dispatches on them.

Why the indexes: the ready and lease orders are heaps with lazy deletion
(heaps.py), so a transition never searches a heap. The same heaps list the
ready and the leased tasks, and a set holds the dead ones, so that
`list_tasks(status)` costs what it returns rather than a walk of every
task; completed tasks alone have no index (docs/DECISIONS.md, "Reads by
status": a set entry would cost more than the tombstone's whole memory
budget).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from walqueue.engine.admission import Setting, describe_value, stage, stage_new_puts
from walqueue.engine.heaps import HEAP_SLACK, due, first_time, live_ids, pruned
from walqueue.engine.invariants import check_invariants
from walqueue.engine.lanes import Lanes, settings_from_json
from walqueue.engine.opkinds import OP_KEYS, OP_KINDS
from walqueue.engine.records import (
    InvalidTransaction,
    Record,
    TaskRecord,
    Tombstone,
    check_status_filter,
    decode_payload,
    identity_digest,
    view,
)
from walqueue.engine.rows import (
    ATTEMPTS,
    COMPLETED,
    DATA,
    DEAD,
    DEADLINE,
    ENTRY,
    GENERATION,
    KEY,
    LANE,
    LEASED,
    READY,
    STATUS,
    STATUSES,
    TASK_ID,
    WORKER,
    HeapEntry,
    Row,
    Stored,
    status_of,
)
from walqueue.engine.snapshot_load import Loaded, check_snapshot_seq, load_records
from walqueue.engine.taskmap import TaskMap
from walqueue.engine.transitions import NOTHING_STAGED, Staging
from walqueue.engine.types import Lease, Task, new_lease
from walqueue.engine.validate import DEFAULT_QUEUE, MAX_INT, check_int, check_queue_name

__all__ = [
    "COMPLETED",
    "DEAD",
    "LEASED",
    "OP_KEYS",
    "OP_KINDS",
    "READY",
    "STATUSES",
    "InvalidTransaction",
    "Record",
    "State",
    "Stored",
    "TaskRecord",
    "Tombstone",
    "apply",
    "apply_one",
    "identity_digest",
]


class State:
    """All tasks, their key index, the ready and lease orders, and the last sequence.

    Mutated only by `apply` (and built by `from_records`, from snapshot_load's pieces); every other method
    reads. The key index holds only keys that differ from their task id, so
    the default key (the task id itself) costs no memory.
    """

    __slots__ = (
        "last_seq",
        "tasks",
        "_key_owner",
        "_lanes",
        "rated",
        "_leases",
        "_counts",
        "_dead",
        "clock",
        "_results",
        "_expiries",
    )

    def __init__(self) -> None:
        self.last_seq = 0
        #: task id -> record; read it, never write it (use `apply`).
        self.tasks: dict[str, Stored] = TaskMap()  # stays tracked: young collections never walk it
        self._key_owner: dict[str, str] = {}
        #: The ready order by queue and priority, and each queue's settings (lanes.py); `rated`: its rated queues.
        self._lanes = Lanes()
        self.rated = self._lanes.rated
        self._leases: list[HeapEntry] = []
        self._counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        #: The ids of the dead tasks (the ready and leased ones are in their heaps).
        self._dead: set[str] = set()
        #: The store's clock unit, in units per second, once a "clock" op recorded it (None: never recorded).
        self.clock: int | None = None
        #: Completed tasks' results: task id -> b"<expires> <JSON>" (result ops; kept until they expire or a snapshot).
        self._results: dict[str, bytes] = {}
        self._expiries: list[HeapEntry] = []  # (expires, task id): the results in the order they expire

    # -- reads --------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.tasks)

    def __eq__(self, other: object) -> bool:
        """Equal states hold the same tasks with the same fields, and the same results, at the same sequence."""
        if not isinstance(other, State):
            return NotImplemented
        if (
            self.last_seq != other.last_seq
            or len(self.tasks) != len(other.tasks)
            or self.clock != other.clock
            or self._results != other._results
        ):
            return False
        other_tasks = other.tasks
        for task_id, record in self.tasks.items():
            other_record = other_tasks.get(task_id)
            if other_record is None or view(record).fields() != view(other_record).fields():
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def all_new(self, task_ids: Collection[str], keys: Collection[str]) -> bool:
        """Whether a batch of puts all create tasks: keys distinct, task ids distinct, and none of them known.

        At C speed, for a whole batch (`ops._fresh_batch`, `admission.stage_new_puts`); `keys is task_ids` says
        every key is its task's id. Known: a task has one of `task_ids` or `keys` as its id, or owns one of `keys`.
        True means `lookup_key` of each key is None and no task id is taken; False may also mean a key is a
        task's id without being its key: the caller then asks item by item.
        """
        count = len(task_ids)
        if (keys is not task_ids and len({*keys}) != count) or len({*task_ids}) != count:
            return False
        ids = self.tasks.keys()
        return (
            ids.isdisjoint(task_ids)
            and (keys is task_ids or ids.isdisjoint(keys))
            and not (self._key_owner and not self._key_owner.keys().isdisjoint(keys))
        )

    def lookup_key(self, key: str) -> str | None:
        """The id of the task that owns `key`, or ``None`` if the key is unknown.

        A task whose id equals `key` owns it only if its key is its id too.
        """
        owner = self._key_owner.get(key)
        if owner is not None:
            return owner
        record = self.tasks.get(key)
        if record is not None and (record[KEY] if type(record) is tuple else view(record).key) == key:
            return key
        return None

    def get_task(self, task_id: str) -> Task | None:
        """A fresh view of the task (its payload decoded anew, so a copy), or ``None``."""
        record = self.tasks.get(task_id)
        return None if record is None else view(record).to_task()

    def list_tasks(self, status: str | None = None, queue: str | None = None) -> list[Task]:
        """Every task (or every task with `status`), ordered by task id.

        O(k log k) for the k tasks returned, but for ``"completed"``, which
        walks every task once some are completed (and costs nothing when none is).
        """
        check_status_filter(status)
        tasks = self.tasks
        ids: Iterable[str]
        if queue is not None and check_queue_name(queue):
            ids = self._queue_ids(status, queue)
        elif status is None:
            ids = tasks
        elif not self._counts[status]:
            return []
        elif status == READY or status == LEASED:
            ids = live_ids(self._lanes.ready_entries() if status == READY else self._leases, tasks)
        elif status == DEAD:
            ids = self._dead
        else:
            ids = [task_id for task_id, record in tasks.items() if status_of(record) == status]
        return [view(tasks[task_id]).to_task() for task_id in sorted(ids)]

    def _queue_ids(self, status: str | None, queue: str) -> list[str]:
        """The ids of queue `queue`'s tasks (with `status`): its lanes for ready ones, a walk otherwise."""
        return self._lanes.task_ids(self.tasks, status, queue, live_ids(self._leases, self.tasks), self._dead)

    def queues(self) -> list[dict[str, Any]]:
        """`Queue.queues`: every queue that holds a task or has a setting (lanes.Lanes.describe)."""
        return self._lanes.describe(self.tasks)

    def has_lanes(self) -> bool:
        """Whether any queue but the default one is known (metrics count by queue only then)."""
        return len(self._lanes.queues) > 1

    def queue_settings(self, queue: str) -> dict[str, Any]:
        """`queue`'s settings: concurrency, rate and paused (no limit, not paused for a queue never configured)."""
        return self._lanes.settings_of(queue)

    def settings_json(self) -> dict[str, Any]:
        """What a snapshot's header keeps of the queues (lanes.Lanes.settings_json); empty without settings."""
        return self._lanes.settings_json()

    def restore_settings(self, settings: Mapping[str, Any]) -> None:
        """Install a snapshot's queue settings (as lanes.settings_from_json checked them) and limiter state."""
        self._lanes.restore(settings, self.tasks)

    def status_index(self, status: str, queue: str | None = None) -> list[Any]:
        """A copy of what holds `status`'s tasks: heap entries (ready, leased) or task ids (dead, completed).

        With `queue`, only that queue's tasks (ready: its lanes' entries; others: the ids, filtered).
        """
        if queue is not None and check_queue_name(queue):
            return self._lanes.ready_entries(queue) if status == READY else self._queue_ids(status, queue)
        if status == READY:
            return self._lanes.ready_entries()
        if status == LEASED:
            return list(self._leases)
        if status == DEAD:
            return list(self._dead)
        return [task_id for task_id, record in self.tasks.items() if status_of(record) == status]

    def result(self, task_id: str) -> tuple[int, bytes] | None:
        """A completed task's stored result: (expires, its JSON); None if there is none (or it was dropped)."""
        packed = self._results.get(task_id)
        if packed is None:
            return None
        expires, _, encoded = packed.partition(b" ")
        return int(expires), encoded

    def results_copy(self) -> dict[str, bytes]:
        """The stored results as they are now (a snapshot writes them with their tasks' records)."""
        return dict(self._results)

    def _store_results(self, results: Mapping[str, tuple[int, int, bytes]]) -> None:
        """Keep a transaction's results; drop those expired by its time (memory stays bounded by the TTL)."""
        stored, expiries = self._results, self._expiries
        latest = 0
        for task_id, (at, expires, encoded) in results.items():
            stored[task_id] = b"%d %b" % (expires, encoded)
            heapq.heappush(expiries, (expires, task_id))
            latest = max(latest, at)
        while expiries and expiries[0][0] <= latest:
            expires, task_id = heapq.heappop(expiries)
            packed = stored.get(task_id)
            if packed is not None and packed.startswith(b"%d " % expires):
                del stored[task_id]

    def counts(self) -> dict[str, int]:
        """The number of tasks per status, always with exactly the four status keys."""
        return dict(self._counts)

    def next_available_at(self) -> int | None:
        """The smallest `available_at` of a ready task (None: none is ready); amortized O(log n)."""
        return self._lanes.next_available_at(self.tasks)

    def next_deadline(self) -> int | None:
        """The earliest deadline of a leased task (None: none is leased); amortized O(log n)."""
        return first_time(self._leases, self.tasks)

    def identity(self, task_id: str) -> bytes:
        """The 32-byte identity digest of the task's original put (`KeyError` if unknown)."""
        return view(self.tasks[task_id]).identity

    def lease_for(self, task_id: str) -> Lease:
        """The lease token of a leased task (`KeyError` if unknown, `ValueError` if not leased)."""
        row = self.tasks[task_id]
        if type(row) is not tuple or row[STATUS] != LEASED:
            raise ValueError(f"task {task_id!r} is {status_of(row)}, not leased")
        lane = row[LANE] if len(row) > LANE else (DEFAULT_QUEUE, 0)
        return new_lease(
            row[TASK_ID],
            row[WORKER],
            row[GENERATION],
            row[DEADLINE],
            row[ATTEMPTS],
            decode_payload(row[DATA]),
            lane[0],
            lane[1],
        )

    # -- planner support ------------------------------------------------------

    def peek_ready(
        self, now: int, limit: int, queues: Iterable[str] | None = None, *, _checked: bool = False
    ) -> list[str]:
        """Up to `limit` ready task ids with ``available_at <= now`` that `reserve` would lease, best first.

        Best: higher priority, then (available_at, task id); only from `queues`
        (None: every queue), and within each queue's limits at `now`. O(k log n)
        for k results, plus one step per lane made due (lanes.py). `_checked`: the planners checked `now`, `limit`.
        """
        if not _checked:
            check_int(now, "now")
            check_int(limit, "limit", 1)
        return self._lanes.pick(now, limit, queues, self.tasks)

    def peek_expired(self, now: int, *, _checked: bool = False) -> list[str]:
        """Every leased task id with ``deadline <= now``, in (deadline, task id) order (`_checked`: as `peek_ready`)."""
        if not _checked:
            check_int(now, "now")
        return due(self._leases, self.tasks, now, MAX_INT)

    # -- snapshot support -----------------------------------------------------

    def iter_record_json(self) -> Iterator[bytes]:
        """Every task's snapshot record as canonical JSON bytes, in task-id order."""
        tasks = self.tasks
        for task_id in sorted(tasks):
            yield view(tasks[task_id]).record_json()  # (compaction writes rows with records.row_json)

    @classmethod
    def from_records(
        cls,
        seq: int,
        records: Iterable[Mapping[str, Any]],
        *,
        decoded: bool = False,
        clock: int | None = None,
        queues: object = None,
    ) -> State:
        """Rebuild the state written as snapshot `seq` from its decoded records (see snapshot_load).

        Any flaw is `InvalidTransaction`; nothing is normalized, so the
        result equals the state that was written. `decoded=True` (records
        straight from the JSON decoder) checks payloads as `apply`'s
        `decoded` does. `clock`: the store's clock unit, from the snapshot's header.
        """
        seq = check_snapshot_seq(seq)
        if clock is not None:
            check_int(clock, "the snapshot's clock", 1)
        loaded = load_records(records, decoded=decoded)
        state = cls()
        state.tasks = loaded.tasks
        state._key_owner = loaded.key_owner
        assert loaded.lanes is not None
        state._lanes = loaded.lanes
        state.rated = loaded.lanes.rated
        state._leases = loaded.leases
        state._counts = loaded.counts
        state._dead = loaded.dead
        state._results = dict(loaded.results)
        state._expiries = [(int(packed.partition(b" ")[0]), task_id) for task_id, packed in state._results.items()]
        heapq.heapify(state._expiries)
        state.last_seq = seq
        state.clock = clock
        if queues is not None:  # the header's queue settings (lanes): checked, then installed
            try:
                state._lanes.restore(settings_from_json(queues), state.tasks)
            except (TypeError, ValueError) as exc:
                raise InvalidTransaction(f"snapshot queues: {exc}") from None
        return state

    # -- commit (apply's second half) -----------------------------------------

    def _commit(self, staged: Collection[tuple[str, Stored]], seq: int) -> Sequence[str]:
        """Install the staged (task id, record) pairs, each replacing the task's record, and advance to `seq`.

        Returns the ids of the tasks this created, in op order (the snapshot
        bookkeeping needs them; no list is made when there are none).
        """
        tasks = self.tasks
        counts = self._counts
        dead = self._dead
        created: list[str] | None = None
        lanes = self._lanes
        # New ready tasks of the default lane go into its heap together, after the loop (Lanes.added), if
        # the first one finds `bulk_default`. A lone record (a put, a lease, an ack) takes `moved`: no list.
        added: list[HeapEntry] | None = None
        bulk = len(staged) > 1
        for task_id, record in staged:
            old = tasks.get(task_id)
            row: Row = record if type(record) is tuple else ()  # (an ack's tombstone: no row)
            status = row[STATUS] if row else COMPLETED
            if old is None:
                key: str = row[KEY] if row else view(record).key  # (created and acked in one transaction)
                if key != task_id:
                    self._key_owner[key] = task_id
                if created is None:
                    created = [task_id]
                else:
                    created.append(task_id)
            else:
                assert type(old) is tuple  # a completed task never changes
                counts[old[STATUS]] -= 1
                if old[STATUS] == DEAD:
                    dead.discard(task_id)
            counts[status] += 1
            if status == DEAD:
                dead.add(task_id)
            tasks[task_id] = record
            if status == READY:
                entry: HeapEntry = row[ENTRY]
                if bulk and old is None and len(row) == LANE:  # (the default lane's rows have no lane items)
                    if added is None:
                        added, bulk = [], lanes.bulk_default()
                    if bulk:
                        added.append(entry)
                        continue
            lanes.moved(old, record, tasks)
            if status == LEASED:
                heapq.heappush(self._leases, row[ENTRY])
        if added:
            lanes.added(added, tasks)
        self.last_seq = seq
        # WARNING: these two tests restate `pruned`'s bound, so that the usual
        # commit, which rebuilds nothing, makes no call for it (this runs for
        # every transaction opened or committed). Keep them equal to it: the
        # invariant check, run after every call in the tests, asks `pruned`
        # itself whether a heap is over the bound.
        if len(self._leases) > 2 * counts[LEASED] + HEAP_SLACK:
            self._leases = pruned(self._leases, tasks, counts[LEASED])
        return () if created is None else created

    def _commit_new(self, staged: dict[str, Stored], seq: int) -> list[str]:
        """`_commit` of new ready rows alone (`apply`'s `_fresh_puts`): installed at once, the default lane's in bulk.

        The same end as `_commit`'s loop (which takes such a transaction from the log): every row is new (no
        record replaced, none dead), so the tasks and the ready count take them in one step each, and the lanes
        take the default lane's entries through `added`, in bulk, while it has no setting; the others in op order.
        """
        tasks, lanes, owners = self.tasks, self._lanes, self._key_owner
        tasks.update(staged)
        self._counts[READY] += len(staged)
        added: list[HeapEntry] = []
        bulk = lanes.bulk_default()
        for task_id, row in staged.items():
            if row[KEY] != task_id:
                owners[row[KEY]] = task_id  # type: ignore[index]  # (rows, from the put transition)
            if bulk and len(row) == LANE:
                added.append(row[ENTRY])  # type: ignore[arg-type]
            else:
                lanes.moved(None, row, tasks)
        if added:
            lanes.added(added, tasks)
        self.last_seq = seq
        return list(staged)

    def check_invariants(self) -> None:
        """Verify every index against the records; `AssertionError` names the first broken one.

        O(n): for tests and offline checks (`walqueue-fsck --replay`), never
        on a live path (invariants.py).
        """
        check_invariants(self.indexes(), self.lookup_key)

    def indexes(self) -> Loaded:
        """The records and every index, in the shape `load_records` builds them: shared, not copied (read only)."""
        return Loaded(
            self.tasks,
            self._key_owner,
            self._lanes.ready_entries(),
            self._leases,
            self._counts,
            self._dead,
            self._results,
            self._lanes,
        )


# -- apply ---------------------------------------------------------------------


def apply(
    state: State, tx: Mapping[str, Any], *, decoded: bool = False, _planned: bool = False, _fresh_puts: bool = False
) -> Sequence[str]:
    """Apply transaction `tx` (``{"seq": S, "ops": [...]}``) to `state`, whole or not at all; return the new task ids.

    Every op is checked first, against the state as the earlier ops of the
    same transaction would leave it (staged copies of the touched records);
    only when all are valid are the staged records committed. Any flaw
    raises `InvalidTransaction` naming the op and the reason, and leaves
    `state` exactly as it was.

    `decoded=True` says that `tx` is exactly what the JSON decoder returned
    for a frame (recovery): payloads are then checked with
    `check_payload(decoded=True)`, which reaches the same verdict and bytes.
    `_planned=True`, like h11's ``_parsed``, is for `Queue` alone: the ops are
    a planner's (ops.py), whose fields were checked when they were planned
    and whose puts carry their payload encoded. Everything that depends on
    the state is checked either way. `_fresh_puts=True` (with `_planned`): the
    ops are `plan_puts`' new tasks, staged by `admission.stage_new_puts`.
    """
    if type(tx) is not dict:
        raise InvalidTransaction(f"a transaction must be a dict, not {type(tx).__name__}")
    if len(tx) != 2 or "seq" not in tx or "ops" not in tx:  # exactly these two keys, without a keys view
        raise InvalidTransaction(f"a transaction has exactly the keys ops and seq, not {sorted(map(repr, tx))}")
    seq = tx["seq"]
    if type(seq) is not int or seq != state.last_seq + 1:
        raise InvalidTransaction(f"transaction sequence must be {state.last_seq + 1}, not {describe_value(seq)}")
    ops = tx["ops"]
    if type(ops) is not list or not ops:
        raise InvalidTransaction(f"transaction {seq}: ops must be a non-empty list")
    if len(ops) == 1:
        return apply_one(state, seq, ops[0], NOTHING_STAGED[decoded, _planned])
    staging = Staging(decoded, _planned)
    staged = staging.records
    if _fresh_puts and _planned:  # ops.plan_puts' new tasks: nothing in them but records to stage and commit
        stage_new_puts(state, staging, seq, ops)
        return state._commit_new(staged, seq)
    for index, op in enumerate(ops):
        record = stage(state, staging, seq, index, op)
        if type(record) is Setting:  # a store-level op's (setting, value), applied after the records
            staging.settings[record.name] = record.value
            continue
        task_id = op["task"]
        if task_id not in staged and task_id not in state.tasks and type(record) is tuple:
            staging.keys.add(record[KEY])  # the op created its task (a row): its key is taken
        staged[task_id] = record
    results = staging.results
    if results:  # a result op's task must end the transaction completed (its ack follows)
        for task_id in results:
            if status_of(staged[task_id]) != COMPLETED:
                raise InvalidTransaction(f"transaction {seq}: the result of {task_id!r:.100} has no ack after it")
    created = state._commit(staged.items(), seq)
    if results:
        state._store_results(results)
    for setting, value in staging.settings.items():
        setattr(state, setting, value)
    for op in ops:
        if op["op"] == "lease" and "at" in op:
            state._lanes.leased_at(view(state.tasks[op["task"]]).queue, op["at"])
    return created


def apply_one(state: State, seq: int, op: object, staging: Staging | None = None) -> Sequence[str]:
    """`apply` of the transaction of the one op `op` at `seq` (the next): nothing later in it sees its result.

    `Queue._commit` calls it directly for a planner's op (`staging` None: `apply`'s `_planned`), whose
    transaction is well formed by construction: building and checking its dict, and `apply`'s keyword call,
    cost about 4,400 instructions a commit, every reserve's and ack's (DECISIONS §61).
    """
    if staging is None:
        staging = _PLANNED_ALONE
    if type(op) is dict and op.get("op") == "configure":
        return _configure(state, seq, op, staging.planned)
    record = stage(state, staging, seq, 0, op)
    if type(record) is Setting:  # a store-level op's (setting, value)
        setattr(state, *record)
        state.last_seq = seq
        return ()
    assert type(op) is dict  # (`stage` admits nothing else)
    created = state._commit(((op["task"], record),), seq)  # a valid op's task is its task id
    if "at" in op and op["op"] == "lease":
        state._lanes.leased_at(view(record).queue, op["at"])
    return created


_PLANNED_ALONE = NOTHING_STAGED[False, True]


def _configure(state: State, seq: int, op: dict[str, Any], planned: bool) -> Sequence[str]:
    """Apply a configure op (alone in its transaction): queue ``op["queue"]`` gets exactly the op's settings."""
    try:
        state._lanes.apply_configure(OP_KINDS["configure"], op, planned, state.tasks)
    except (TypeError, ValueError) as exc:
        raise InvalidTransaction(f"transaction {seq} op 0 (configure): {exc}") from None
    state.last_seq = seq
    return ()
