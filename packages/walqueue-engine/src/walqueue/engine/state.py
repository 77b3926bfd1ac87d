"""The queue's state machine: task records, their indexes, and `apply`, the only transitions.

Everything that changes a task lives in this file, and this file knows no
files, clocks, threads or hooks. Live operations and recovery both call the
same `apply(state, transaction)`, so a transaction means exactly the same
thing whether it was just written or is being replayed years later.

The transitions, as data (SPEC §3); every op names its task and is valid
only from the status in the second column:

=========  ========  ==========================  ================================
op         from      to                          also
=========  ========  ==========================  ================================
put        (new)     ready                       attempts 0, generation 0
lease      ready     leased                      G == generation + 1; attempts += 1
expire     leased    dead if attempts >= max,    available_at = old deadline
                     else ready
ack        leased    completed                   payload dropped (a tombstone)
release    leased    dead if attempts >= max,    available_at = A
                     else ready
=========  ========  ==========================  ================================

`worker` and `deadline` are set exactly while a task is leased. Anything
else is an `InvalidTransaction`, raised before the state is touched.

Why the shapes below: a record is a `__slots__` object whose payload is kept
as canonical JSON bytes behind its identity digest (one bytes object, no
decoded tree), so a million tasks cost little memory and a snapshot splices
the stored bytes without re-encoding them. The ready and lease orders are
heaps with lazy deletion: a heap entry is live only while it is the very
tuple its record points at, so a transition never searches a heap.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import itemgetter
from typing import Any

from walqueue.engine.types import Lease, Task, new_lease
from walqueue.engine.validate import (
    MAX_FRAME_BYTES,
    MAX_INT,
    MAX_NAME_BYTES,
    RECORD_WORST_CASE_EXTRA,
    check_decoded_payload,
    check_int,
    check_name,
    check_payload,
    check_record_fits,
    is_name,
)
from walqueue.format.canonical import canonical_json, canonical_str, parse_json

__all__ = [
    "COMPLETED",
    "DEAD",
    "EncodedPayload",
    "LEASED",
    "OP_KEYS",
    "READY",
    "STATUSES",
    "InvalidTransaction",
    "State",
    "Record",
    "TaskRecord",
    "Tombstone",
    "apply",
    "identity_digest",
    "request_identity",
]

READY = "ready"
LEASED = "leased"
COMPLETED = "completed"
DEAD = "dead"
#: Every status a task can have, in the order `counts()` lists them.
STATUSES: tuple[str, ...] = (READY, LEASED, COMPLETED, DEAD)

_DIGEST_BYTES = 32
# A heap is rebuilt from its live entries once its dead entries outnumber the
# live ones by this much, so stale entries (of tasks acked or released long
# before their deadline) cost amortized O(1) and memory stays bounded.
_HEAP_SLACK = 64

HeapEntry = tuple[int, str]


class InvalidTransaction(ValueError):
    """A transaction (or snapshot record) that the state machine refuses; the state is untouched.

    Recovery turns it into `CorruptStore`: a log written by WALQueue never
    holds one.
    """


def request_identity(task_id: str, payload_json: bytes, available_at: int, max_attempts: int) -> bytes:
    """SHA-256 of the canonical JSON of a put's identity (SPEC §2).

    The identity object is ``{"available_at":A,"max_attempts":M,"payload":P,
    "task":T}``; two puts are identical iff these bytes are.
    """
    return identity_digest(canonical_json(task_id), payload_json, available_at, max_attempts)


def identity_digest(task_json: bytes, payload_json: bytes, available_at: int, max_attempts: int) -> bytes:
    """`request_identity` from the already-canonical task id and payload bytes.

    Splices them into the identity object (keys in sorted order) instead of
    encoding the payload a second time; the tests prove it byte-equal to
    `canonical_json` of that object.
    """
    text = b'{"available_at":%d,"max_attempts":%d,"payload":%b,"task":%b}' % (
        available_at,
        max_attempts,
        payload_json,
        task_json,
    )
    return hashlib.sha256(text).digest()


class EncodedPayload:
    """A put's payload as the planner validated it: its canonical JSON, the put's identity digest, and the op's JSON.

    `ops.put_op` validates a payload once and puts this carrier in the op,
    so that `apply` and the frame encoder reuse the bytes and the digest
    instead of walking, encoding and hashing the payload again, and the
    writer frames `op_json`, the canonical JSON of the whole op, as it is.
    Only the engine's planners create it, from the very task id, key,
    available_at and max_attempts of the same op; anything decoded from disk
    is a plain dict and is checked in full. The transition is the same
    either way: the stored bytes and digest are identical. It is
    deliberately not a dict, so that nothing can encode it as JSON by
    mistake.
    """

    __slots__ = ("canonical", "identity", "op_json")

    def __init__(self, canonical: bytes, identity: bytes, op_json: bytes) -> None:
        self.canonical = canonical
        self.identity = identity
        self.op_json = op_json

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EncodedPayload):
            return NotImplemented
        return self.canonical == other.canonical and self.identity == other.identity and self.op_json == other.op_json

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EncodedPayload({self.canonical!r:.80})"


def _decode_payload(blob: bytes) -> Any:
    """A fresh decoded copy of the payload stored after the digest in `blob`.

    `parse_json` rather than `json.loads`: the stored bytes are canonical,
    which its scanner path reads at a third of `json.loads`' cost for a
    small payload (no encoding detection, no whitespace regex).
    """
    return parse_json(blob[_DIGEST_BYTES:])


class _RecordView:
    """What every stored task answers, whether it is a full `TaskRecord` or a packed `Tombstone`.

    The two shapes exist for memory (a completed task is kept forever, so it
    must be small), not for meaning: both expose the same ten fields, and
    everything that reads a task goes through them.
    """

    __slots__ = ()

    task_id: str
    key: str
    status: str
    available_at: int
    max_attempts: int
    attempts: int
    generation: int
    worker: str | None
    deadline: int | None

    @property
    def blob(self) -> bytes:  # pragma: no cover - both subclasses define it
        raise NotImplementedError

    def fields(self) -> tuple[object, ...]:
        """Everything that is state (not `entry`, which is only an index position)."""
        return (
            self.task_id,
            self.key,
            self.status,
            self.blob,
            self.available_at,
            self.max_attempts,
            self.attempts,
            self.generation,
            self.worker,
            self.deadline,
        )

    def payload_json(self) -> bytes:
        """The payload's canonical JSON, ``b"null"`` once completed."""
        return self.blob[_DIGEST_BYTES:] or b"null"

    def to_task(self) -> Task:
        payload = _decode_payload(self.blob) if self.status != COMPLETED else None
        return Task(
            task_id=self.task_id,
            key=self.key,
            status=self.status,
            payload=payload,
            available_at=self.available_at,
            max_attempts=self.max_attempts,
            attempts=self.attempts,
            generation=self.generation,
            worker=self.worker,
            deadline=self.deadline,
        )

    def record_json(self) -> bytes:
        """This task's snapshot record (SPEC §3) as canonical JSON, splicing the stored payload bytes."""
        deadline = self.deadline
        worker = self.worker
        return (
            b'{"attempts":%d,"available_at":%d,"deadline":%b,"generation":%d,"identity":"%b","key":%b,'
            b'"max_attempts":%d,"payload":%b,"status":"%b","task":%b,"worker":%b}'
            % (
                self.attempts,
                self.available_at,
                b"null" if deadline is None else b"%d" % deadline,
                self.generation,
                self.blob[:_DIGEST_BYTES].hex().encode("ascii"),
                canonical_str(self.key),
                self.max_attempts,
                self.payload_json(),
                self.status.encode("ascii"),
                canonical_str(self.task_id),
                b"null" if worker is None else canonical_str(worker),
            )
        )


class TaskRecord(_RecordView):
    """The complete state of one task that is not completed.

    `blob` is the 32-byte identity digest followed by the payload's canonical
    JSON. `entry` is the heap tuple that currently stands for this task in
    the ready heap (ready) or the lease heap (leased), ``None`` otherwise.
    Records are never changed after they are committed to a `State`: a
    transition replaces the record, which also makes the old heap entry
    stale at once.
    """

    __slots__ = (
        "task_id",
        "key",
        "status",
        "blob",
        "available_at",
        "max_attempts",
        "attempts",
        "generation",
        "worker",
        "deadline",
        "entry",
    )

    blob: bytes  # a plain slot here, a property in Tombstone
    entry: HeapEntry | None

    def __init__(
        self,
        task_id: str,
        key: str,
        status: str,
        blob: bytes,
        available_at: int,
        max_attempts: int,
        attempts: int,
        generation: int,
        worker: str | None,
        deadline: int | None,
    ) -> None:
        self.task_id = task_id
        self.key = key
        self.status = status
        self.blob = blob
        self.available_at = available_at
        self.max_attempts = max_attempts
        self.attempts = attempts
        self.generation = generation
        self.worker = worker
        self.deadline = deadline
        self.entry = None

    def __repr__(self) -> str:
        return f"TaskRecord{self.fields()!r}"


class Tombstone(_RecordView, bytes):
    """A completed task, packed into one immutable bytes object.

    Completed tasks are kept forever (their keys must keep answering
    retries), so they dominate the memory of a long-lived queue. A
    `TaskRecord` costs about 120 bytes of slots plus a separate digest
    object; this costs one object of about 100 bytes for a short task id:

        identity digest (32 bytes)
        b"<available_at> <max_attempts> <attempts> <task id length>:"  (ASCII)
        task id (UTF-8), then key (UTF-8), the key left empty when it equals the task id

    `generation` is not stored: every transition keeps it equal to
    `attempts` (and snapshot loading refuses a record where it is not), so
    `Tombstone.of` refuses to pack a record that breaks the rule. The fields
    are decoded on access, which is rare: retries, reads and snapshots.
    """

    __slots__ = ()

    # A completed task never has these (class attributes, not storage).
    status = COMPLETED
    worker = None
    deadline = None
    entry = None

    @classmethod
    def of(
        cls, task_id: str, key: str, digest: bytes, available_at: int, max_attempts: int, attempts: int, generation: int
    ) -> Tombstone:
        if generation != attempts:
            raise ValueError(f"generation {generation} differs from attempts {attempts}")
        if len(digest) != _DIGEST_BYTES:
            raise ValueError(f"an identity digest has {_DIGEST_BYTES} bytes, not {len(digest)}")
        task_bytes = task_id.encode("utf-8")
        return cls(
            b"%b%d %d %d %d:%b%b"
            % (
                digest,
                available_at,
                max_attempts,
                attempts,
                len(task_bytes),
                task_bytes,
                b"" if key == task_id else key.encode("utf-8"),
            )
        )

    def _numbers(self) -> tuple[int, int, int, int, int]:
        """(available_at, max_attempts, attempts, task id length, where the task id starts)."""
        colon = self.index(b":", _DIGEST_BYTES)
        available_at, max_attempts, attempts, task_len = map(int, self[_DIGEST_BYTES:colon].split())
        return available_at, max_attempts, attempts, task_len, colon + 1

    @property
    def blob(self) -> bytes:
        return bytes(self[:_DIGEST_BYTES])

    @property
    def task_id(self) -> str:  # type: ignore[override]
        *_, task_len, start = self._numbers()
        return self[start : start + task_len].decode("utf-8")

    @property
    def key(self) -> str:  # type: ignore[override]
        *_, task_len, start = self._numbers()
        key = self[start + task_len :]
        return key.decode("utf-8") if key else self[start : start + task_len].decode("utf-8")

    @property
    def available_at(self) -> int:  # type: ignore[override]
        return self._numbers()[0]

    @property
    def max_attempts(self) -> int:  # type: ignore[override]
        return self._numbers()[1]

    @property
    def attempts(self) -> int:  # type: ignore[override]
        return self._numbers()[2]

    @property
    def generation(self) -> int:  # type: ignore[override]
        return self._numbers()[2]

    def __repr__(self) -> str:
        return f"Tombstone{self.fields()!r}"


Record = TaskRecord | Tombstone


class State:
    """All tasks, their key index, the ready and lease orders, and the last sequence.

    Mutated only by `apply` (and built by `from_records`); every other method
    reads. The key index holds only keys that differ from their task id, so
    the default key (the task id itself) costs no memory.
    """

    __slots__ = ("last_seq", "tasks", "_key_owner", "_ready", "_leases", "_counts")

    def __init__(self) -> None:
        self.last_seq = 0
        #: task id -> record; read it, never write it (use `apply`).
        self.tasks: dict[str, Record] = {}
        self._key_owner: dict[str, str] = {}
        self._ready: list[HeapEntry] = []
        self._leases: list[HeapEntry] = []
        self._counts: dict[str, int] = dict.fromkeys(STATUSES, 0)

    # -- reads --------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.tasks)

    def __eq__(self, other: object) -> bool:
        """Equal states hold the same tasks with the same fields at the same sequence."""
        if not isinstance(other, State):
            return NotImplemented
        if self.last_seq != other.last_seq or len(self.tasks) != len(other.tasks):
            return False
        other_tasks = other.tasks
        for task_id, record in self.tasks.items():
            other_record = other_tasks.get(task_id)
            if other_record is None or record.fields() != other_record.fields():
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def lookup_key(self, key: str) -> str | None:
        """The id of the task that owns `key`, or ``None`` if the key is unknown.

        A task whose id equals `key` owns it only if its key is its id too.
        """
        owner = self._key_owner.get(key)
        if owner is not None:
            return owner
        record = self.tasks.get(key)
        if record is not None and record.key == key:
            return key
        return None

    def get_task(self, task_id: str) -> Task | None:
        """A fresh view of the task (its payload decoded anew, so a copy), or ``None``."""
        record = self.tasks.get(task_id)
        return None if record is None else record.to_task()

    def list_tasks(self, status: str | None = None) -> list[Task]:
        """Every task (or every task with `status`), ordered by task id."""
        if status is not None and (type(status) is not str or status not in STATUSES):
            raise ValueError(f"status must be one of {', '.join(STATUSES)} or None, not {status!r}")
        tasks = self.tasks
        return [
            tasks[task_id].to_task() for task_id in sorted(tasks) if status is None or tasks[task_id].status == status
        ]

    def counts(self) -> dict[str, int]:
        """The number of tasks per status, always with exactly the four status keys."""
        return dict(self._counts)

    def identity(self, task_id: str) -> bytes:
        """The 32-byte identity digest of the task's original put (`KeyError` if unknown)."""
        return self.tasks[task_id].blob[:_DIGEST_BYTES]

    def lease_for(self, task_id: str) -> Lease:
        """The lease token of a leased task (`KeyError` if unknown, `ValueError` if not leased)."""
        record = self.tasks[task_id]
        if record.status != LEASED or record.worker is None or record.deadline is None:
            raise ValueError(f"task {task_id!r} is {record.status}, not leased")
        return new_lease(
            record.task_id,
            record.worker,
            record.generation,
            record.deadline,
            record.attempts,
            _decode_payload(record.blob),
        )

    # -- planner support ------------------------------------------------------

    def peek_ready(self, now: int, limit: int) -> list[str]:
        """Up to `limit` ready task ids with ``available_at <= now``, in (available_at, task id) order.

        Costs O(k log n) for k results: the first entries are popped and
        pushed back (stale entries met on the way are dropped for good).
        """
        if not (type(now) is int and type(limit) is int and 0 <= now <= MAX_INT and 1 <= limit <= MAX_INT):
            check_int(now, "now")  # the planners' usual arguments pass the test above;
            check_int(limit, "limit", 1)  # these name the flaw of any other
        return self._peek(self._ready, now, limit)

    def peek_expired(self, now: int) -> list[str]:
        """Every leased task id with ``deadline <= now``, in (deadline, task id) order."""
        if type(now) is not int or not 0 <= now <= MAX_INT:
            check_int(now, "now")
        return self._peek(self._leases, now, MAX_INT)

    def _peek(self, heap: list[HeapEntry], now: int, limit: int) -> list[str]:
        tasks = self.tasks
        # Stale entries at the top are dropped for good; then the usual
        # answer (nothing due, or the one due entry a reserve of one asks
        # for) needs no pop and push back.
        while heap:
            entry = heap[0]
            if tasks[entry[1]].entry is entry:
                break
            heapq.heappop(heap)
        if not heap or heap[0][0] > now:
            return []
        if limit == 1:
            return [heap[0][1]]
        live: list[HeapEntry] = []
        while heap and len(live) < limit:
            entry = heap[0]
            if tasks[entry[1]].entry is not entry:
                heapq.heappop(heap)
                continue
            if entry[0] > now:
                break
            live.append(heapq.heappop(heap))
        for entry in live:
            heapq.heappush(heap, entry)
        return [entry[1] for entry in live]

    # -- snapshot support -----------------------------------------------------

    def iter_record_json(self) -> Iterator[bytes]:
        """Every task's snapshot record as canonical JSON bytes, in task-id order."""
        tasks = self.tasks
        for task_id in sorted(tasks):
            yield tasks[task_id].record_json()

    @classmethod
    def from_records(cls, seq: int, records: Iterable[Mapping[str, Any]], *, decoded: bool = False) -> State:
        """Rebuild the state written as snapshot `seq` from its decoded records.

        Every record is checked completely, including the invariants that the
        transitions keep (``generation == attempts``; a ready task has
        attempts left, a dead one none; a leased or completed one was leased
        at least once), and records must come in strictly increasing task-id
        order with unique keys, as `iter_record_json` writes them. Any
        failure is `InvalidTransaction`; nothing is normalized, so the result
        equals the state that was written. `decoded=True` (records straight
        from the JSON decoder) checks payloads as `apply`'s `decoded` does.

        Opening a store spends most of its time here, once per task, so the
        rules of `_record_from_dict` are unrolled into the loop: one C call
        fetches all eleven fields (which also proves the key set), exact-type
        and range tests replace the one-line check functions, an ASCII name's
        length is its UTF-8 size, and the record-fits bound is settled by the
        payload's length alone. A record that this fast path does not accept
        at once (any flaw, or a rare shape: a payload near the frame bound)
        goes to `_record_from_dict`, which decides and names the flaw; the
        fast path is only ever stricter, and builds the very record the full
        path would (tests/engine/test_snapshot_load.py holds them to that).

        The cyclic GC is paused while the records are built (and decoded,
        when `records` streams from a reader): a load allocates several
        tracked objects per task and frees none of them, so the collections
        they would trigger only walk the growing state again and again
        (measured: 6-8 % of an open). The pause is process-wide, for the
        length of the load, and the GC is re-enabled (if it was enabled)
        whatever happens.
        """
        check = check_decoded_payload if decoded else check_payload
        if type(seq) is not int or not 0 <= seq <= MAX_INT:
            raise InvalidTransaction(f"snapshot sequence {seq!r} is not an int in 0..{MAX_INT}")
        state = cls()
        tasks = state.tasks
        key_owner = state._key_owner
        ready = state._ready
        leases = state._leases
        counts = state._counts
        previous: str | None = None
        record: Record
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for index, value in enumerate(records):
                try:
                    if type(value) is not dict or len(value) != _RECORD_FIELD_COUNT:
                        raise _Unsettled
                    (
                        task_id,
                        key,
                        identity,
                        status,
                        payload,
                        available_at,
                        max_attempts,
                        attempts,
                        generation,
                        worker,
                        deadline,
                    ) = _record_fields(value)  # KeyError: another key set
                    if not (
                        is_name(task_id)
                        and type(key) is str
                        and (key == task_id or is_name(key))
                        and type(status) is str
                        and type(available_at) is int
                        and 0 <= available_at <= MAX_INT
                        and type(max_attempts) is int
                        and 1 <= max_attempts <= MAX_INT
                        and type(attempts) is int
                        and 0 <= attempts <= max_attempts
                        and type(generation) is int
                        and generation == attempts
                    ):
                        raise _Unsettled
                    if key == task_id:
                        key = task_id
                    status = _STATUS_CONSTANTS[status]  # KeyError: no status
                    digest = _digest_from_hex(identity)  # ValueError: not 64 lowercase hex digits
                    if status == READY:
                        if worker is not None or deadline is not None or attempts >= max_attempts:
                            raise _Unsettled
                    elif status == LEASED:
                        if not (
                            attempts >= 1 and is_name(worker) and type(deadline) is int and 0 <= deadline <= MAX_INT
                        ):
                            raise _Unsettled
                    elif worker is not None or deadline is not None:
                        raise _Unsettled
                    elif status == DEAD:
                        if attempts < max_attempts:
                            raise _Unsettled
                    elif payload is not None or attempts < 1:  # completed
                        raise _Unsettled
                    if status == COMPLETED:
                        record = Tombstone.of(task_id, key, digest, available_at, max_attempts, attempts, generation)
                    else:
                        payload_json = check(payload)  # TypeError/ValueError: not a storable payload
                        if len(payload_json) > _FITTING_PAYLOAD_BYTES:
                            raise _Unsettled
                        record = TaskRecord(
                            task_id,
                            key,
                            status,
                            digest + payload_json,
                            available_at,
                            max_attempts,
                            attempts,
                            generation,
                            worker,
                            deadline,
                        )
                except (_Unsettled, KeyError, TypeError, ValueError):
                    try:
                        record = _record_from_dict(value, check)
                    except (TypeError, ValueError) as exc:
                        raise InvalidTransaction(f"snapshot record {index}: {exc}") from None
                    task_id = record.task_id
                    key = record.key
                    status = record.status
                if previous is not None and not previous < task_id:
                    raise InvalidTransaction(f"snapshot record {index}: task {task_id!r:.100} is out of task-id order")
                previous = task_id
                if key != task_id:
                    if key in key_owner or (key in tasks and tasks[key].key == key):
                        raise InvalidTransaction(f"snapshot record {index}: key {key!r:.100} is repeated")
                    key_owner[key] = task_id
                elif task_id in key_owner:
                    raise InvalidTransaction(f"snapshot record {index}: key {key!r:.100} is repeated")
                tasks[task_id] = record
                counts[status] += 1
                if status == READY:
                    assert type(record) is TaskRecord
                    record.entry = entry = (record.available_at, task_id)
                    ready.append(entry)
                elif status == LEASED:
                    assert type(record) is TaskRecord and record.deadline is not None
                    record.entry = entry = (record.deadline, task_id)
                    leases.append(entry)
        finally:
            if gc_was_enabled:
                gc.enable()
        heapq.heapify(ready)
        heapq.heapify(leases)
        state.last_seq = seq
        return state

    # -- commit (apply's second half) -----------------------------------------

    def _commit(self, staged: Iterable[tuple[str, Record]], seq: int) -> None:
        """Install the staged (task id, record) pairs, each replacing the task's record, and advance to `seq`."""
        tasks = self.tasks
        counts = self._counts
        for task_id, record in staged:
            old = tasks.get(task_id)
            if old is None:
                if record.key != task_id:
                    self._key_owner[record.key] = task_id
            else:
                counts[old.status] -= 1
            status = record.status
            counts[status] += 1
            tasks[task_id] = record
            if status == READY:
                assert type(record) is TaskRecord
                record.entry = entry = (record.available_at, task_id)
                heapq.heappush(self._ready, entry)
            elif status == LEASED:
                assert type(record) is TaskRecord and record.deadline is not None
                record.entry = entry = (record.deadline, task_id)
                heapq.heappush(self._leases, entry)
        self.last_seq = seq
        if len(self._ready) > 2 * counts[READY] + _HEAP_SLACK:
            self._ready = self._live_entries(self._ready)
        if len(self._leases) > 2 * counts[LEASED] + _HEAP_SLACK:
            self._leases = self._live_entries(self._leases)

    def _live_entries(self, heap: list[HeapEntry]) -> list[HeapEntry]:
        tasks = self.tasks
        live = [entry for entry in heap if tasks[entry[1]].entry is entry]
        heapq.heapify(live)
        return live

    def check_invariants(self) -> None:
        """Verify every index against the records; `AssertionError` names the first broken one.

        O(n): for tests and offline checks (`walqueue-fsck --replay`), never
        on a live path. Raises explicitly, so that ``python -O`` cannot turn
        it into a silent no-op.
        """

        def require(condition: bool, what: str) -> None:
            if not condition:
                raise AssertionError(f"state invariant broken: {what}")

        counts = dict.fromkeys(STATUSES, 0)
        live_ready = {id(entry) for entry in self._ready}
        live_leases = {id(entry) for entry in self._leases}
        for task_id, record in self.tasks.items():
            require(record.task_id == task_id, f"task {task_id!r} is filed under another id")
            counts[record.status] += 1
            require(self.lookup_key(record.key) == task_id, f"key of task {task_id!r} does not lead back to it")
            leased = record.status == LEASED
            require((record.worker is not None) == leased, f"worker of {record.status} task {task_id!r}")
            require((record.deadline is not None) == leased, f"deadline of {record.status} task {task_id!r}")
            require(
                (len(record.blob) == _DIGEST_BYTES) == (record.status == COMPLETED),
                f"payload of {record.status} task {task_id!r}",
            )
            if record.status == READY:
                require(
                    record.entry == (record.available_at, task_id) and id(record.entry) in live_ready,
                    f"ready task {task_id!r} is not in the ready heap",
                )
            elif leased:
                require(
                    record.entry == (record.deadline, task_id) and id(record.entry) in live_leases,
                    f"leased task {task_id!r} is not in the lease heap",
                )
            else:
                require(record.entry is None, f"{record.status} task {task_id!r} is still in a heap")
        require(counts == self._counts, f"counts {self._counts} differ from the records' {counts}")
        custom_keys = sum(1 for record in self.tasks.values() if record.key != record.task_id)
        require(len(self._key_owner) == custom_keys, "the key index holds keys of no task")
        require(len(self._ready) <= 2 * counts[READY] + _HEAP_SLACK, "the ready heap holds too many stale entries")
        require(len(self._leases) <= 2 * counts[LEASED] + _HEAP_SLACK, "the lease heap holds too many stale entries")


#: The fields of a snapshot record (SPEC §3), in the order `_record_fields` returns them.
_RECORD_FIELDS = (
    "task",
    "key",
    "identity",
    "status",
    "payload",
    "available_at",
    "max_attempts",
    "attempts",
    "generation",
    "worker",
    "deadline",
)
_RECORD_KEYS = frozenset(_RECORD_FIELDS)

# What `State.from_records`' fast path needs: see its docstring and `_record_from_dict`, the rules it unrolls.

#: Every field of a record, fetched in one C call. A dict of `_RECORD_FIELD_COUNT` items that holds all
#: eleven has exactly `_RECORD_KEYS`, so the fetch also settles the key set without comparing sets.
_record_fields = itemgetter(*_RECORD_FIELDS)
_RECORD_FIELD_COUNT = len(_RECORD_KEYS)

#: A decoded status string -> the module's constant: a loaded task shares one status string with every
#: other task (instead of keeping the decoder's copy), and `==` against the constants stops at identity.
_STATUS_CONSTANTS: dict[str, str] = {status: status for status in STATUSES}

#: A payload whose canonical JSON is at most this long passes `check_record_fits` with any two names: a
#: name of at most MAX_NAME_BYTES UTF-8 bytes has a canonical JSON of at most 6 bytes per byte (a control
#: character's \\uXXXX escape; nothing else expands more) plus two quotes. A longer payload (close to the
#: frame bound) goes to `_record_from_dict`, which measures the names.
_FITTING_PAYLOAD_BYTES = MAX_FRAME_BYTES - RECORD_WORST_CASE_EXTRA - 2 * (6 * MAX_NAME_BYTES + 2)


class _Unsettled(Exception):
    """The fast path of `State.from_records` cannot accept a record; `_record_from_dict` decides."""


def _digest_from_hex(identity: object) -> bytes:
    """The 32 bytes written as `identity`: exactly 64 lowercase hex digits, nothing else.

    `bytes.fromhex` alone would also take uppercase digits and spaces; the
    digest encoding back to the very same text rules those out.
    """
    if type(identity) is str and len(identity) == 2 * _DIGEST_BYTES:
        try:
            digest = bytes.fromhex(identity)
        except ValueError:
            pass
        else:
            if digest.hex() == identity:
                return digest
    raise ValueError(f"identity must be 64 lowercase hex digits, not {identity!r:.80}")


def _record_from_dict(value: object, check: Callable[[object], bytes] = check_payload) -> Record:
    """Check one decoded snapshot record completely; `TypeError`/`ValueError` on any flaw.

    The reference for what a record may be: `State.from_records` checks
    most records with the same rules unrolled into its loop, and sends here
    every record that its fast path does not accept, so that this function
    decides and names the flaw. A key equal to the task id is stored as the
    task id's string, and the status as the module's constant, as the fast
    path stores them: the decoder's separate copies would cost memory for
    as long as the task lives.
    """
    if type(value) is not dict:
        raise TypeError(f"a record must be a JSON object, not {type(value).__name__}")
    if value.keys() != _RECORD_KEYS:
        raise ValueError(f"record keys must be exactly {sorted(_RECORD_KEYS)}, not {sorted(map(str, value))}")
    task_id = check_name(value["task"], "task")
    key = check_name(value["key"], "key")
    if key == task_id:
        key = task_id
    identity = value["identity"]
    digest = _digest_from_hex(identity)
    status = value["status"]
    if type(status) is not str or status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {status!r:.80}")
    status = _STATUS_CONSTANTS[status]
    available_at = check_int(value["available_at"], "available_at")
    max_attempts = check_int(value["max_attempts"], "max_attempts", 1)
    attempts = check_int(value["attempts"], "attempts")
    generation = check_int(value["generation"], "generation")
    worker = value["worker"]
    deadline = value["deadline"]
    if status == LEASED:
        check_name(worker, "worker")
        check_int(deadline, "deadline")
    elif worker is not None or deadline is not None:
        raise ValueError(f"a {status} task has no worker and no deadline")
    payload = value["payload"]
    if status == COMPLETED:
        if payload is not None:
            raise ValueError("a completed task's payload must be null")
        blob = b""
    else:
        payload_json = check(payload)
        task_json = canonical_str(task_id)
        check_record_fits(payload_json, task_json, task_json if key == task_id else canonical_str(key))
        blob = digest + payload_json
    # The invariants every sequence of transitions keeps (see the table above).
    if generation != attempts:
        raise ValueError(f"generation {generation} differs from attempts {attempts}")
    if attempts > max_attempts:
        raise ValueError(f"attempts {attempts} exceed max_attempts {max_attempts}")
    if status == READY and attempts >= max_attempts:
        raise ValueError("a ready task has no attempts left")
    if status == DEAD and attempts < max_attempts:
        raise ValueError("a dead task still has attempts left")
    if status in (LEASED, COMPLETED) and attempts < 1:
        raise ValueError(f"a {status} task was never leased")
    if status == COMPLETED:
        return Tombstone.of(task_id, key, digest, available_at, max_attempts, attempts, generation)
    return TaskRecord(task_id, key, status, blob, available_at, max_attempts, attempts, generation, worker, deadline)


# -- apply ---------------------------------------------------------------------

_SETTLE_KEYS = frozenset({"op", "task", "generation"})
#: op name -> the exact keys of that op (SPEC §3).
OP_KEYS: dict[str, frozenset[str]] = {
    "put": frozenset({"op", "task", "key", "payload", "available_at", "max_attempts"}),
    "lease": frozenset({"op", "task", "worker", "generation", "deadline"}),
    "expire": _SETTLE_KEYS,
    "ack": _SETTLE_KEYS,
    "release": frozenset({"op", "task", "generation", "available_at"}),
}


class _OpError(Exception):
    """An op-level refusal; `apply` adds the transaction, the op's index and its name."""


class _Staging:
    """The records a transaction has touched so far, and the keys its puts claimed.

    Later ops of the same transaction see these instead of the committed
    records; nothing here is visible in the `State` until the commit. A
    transaction of one op (most of them) has no later op to inform, so it
    shares an empty one from `_NOTHING_STAGED`, which transitions only read.
    """

    __slots__ = ("records", "keys", "check_payload")

    def __init__(self, decoded: bool) -> None:
        self.records: dict[str, Record] = {}
        self.keys: set[str] = set()
        #: How a put's plain-dict payload is checked (see `apply`'s `decoded`).
        self.check_payload = check_decoded_payload if decoded else check_payload


#: The shared empty staging of one-op transactions, by `decoded`.
_NOTHING_STAGED = {False: _Staging(False), True: _Staging(True)}


def _describe(value: object) -> str:
    """A short repr that never fails (a huge int's repr can raise) and never floods a message."""
    if type(value) is int and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    return f"{value!r:.80}"


def _int(op: dict[str, Any], name: str, minimum: int = 0) -> int:
    value = op[name]
    if type(value) is not int or not minimum <= value <= MAX_INT:
        raise _OpError(f"{name} must be an int in {minimum}..{MAX_INT}, not {_describe(value)}")
    return value


def _current(state: State, staging: _Staging, op: dict[str, Any]) -> Record:
    """The task the op names, as the earlier ops of the same transaction left it."""
    task_id = op["task"]
    if type(task_id) is not str:
        raise _OpError(f"task must be a str, not {type(task_id).__name__}")
    record = staging.records.get(task_id)
    if record is None:
        record = state.tasks.get(task_id)
        if record is None:
            raise _OpError(f"unknown task {task_id!r:.100}")
    return record


def _held(state: State, staging: _Staging, op: dict[str, Any]) -> TaskRecord:
    """The leased task an expire/ack/release op names, checked against its generation."""
    record = _current(state, staging, op)
    generation = _int(op, "generation", 1)
    if record.status != LEASED:
        raise _OpError(f"task {record.task_id!r:.100} is {record.status}, not leased")
    if generation != record.generation:
        raise _OpError(f"task {record.task_id!r:.100} is leased with generation {record.generation}, not {generation}")
    assert type(record) is TaskRecord
    return record


def _unleased(record: TaskRecord, available_at: int) -> TaskRecord:
    """Where expire and release send a leased task: ready again, or dead once its attempts are spent."""
    return TaskRecord(
        record.task_id,
        record.key,
        DEAD if record.attempts >= record.max_attempts else READY,
        record.blob,
        available_at,
        record.max_attempts,
        record.attempts,
        record.generation,
        None,
        None,
    )


def _put(state: State, staging: _Staging, op: dict[str, Any]) -> Record:
    payload = op["payload"]
    available_at = op["available_at"]
    if type(available_at) is not int or not 0 <= available_at <= MAX_INT:
        _int(op, "available_at")  # raises, naming the flaw
    max_attempts = op["max_attempts"]
    if type(max_attempts) is not int or not 1 <= max_attempts <= MAX_INT:
        _int(op, "max_attempts", 1)
    if type(payload) is EncodedPayload:
        # Built by ops.put_op from this op's own validated names and
        # numbers: the checks below were made there, once.
        task_id, key = op["task"], op["key"]
        payload_json, digest = payload.canonical, payload.identity
    else:
        try:
            task_id = check_name(op["task"], "task")
            key = check_name(op["key"], "key")
            payload_json = staging.check_payload(payload)
            task_json = canonical_str(task_id)
            check_record_fits(payload_json, task_json, task_json if key == task_id else canonical_str(key))
        except (TypeError, ValueError) as exc:
            raise _OpError(str(exc)) from None
        digest = identity_digest(task_json, payload_json, available_at, max_attempts)
    if task_id in state.tasks or task_id in staging.records:
        raise _OpError(f"task {task_id!r:.100} already exists")
    if key in staging.keys or state.lookup_key(key) is not None:
        raise _OpError(f"key {key!r:.100} is already known")
    return TaskRecord(task_id, key, READY, digest + payload_json, available_at, max_attempts, 0, 0, None, None)


def _lease(state: State, staging: _Staging, op: dict[str, Any]) -> Record:
    record = _current(state, staging, op)
    try:
        worker = check_name(op["worker"], "worker")
    except (TypeError, ValueError) as exc:
        raise _OpError(str(exc)) from None
    generation = _int(op, "generation", 1)
    deadline = _int(op, "deadline")
    if record.status != READY:
        raise _OpError(f"task {record.task_id!r:.100} is {record.status}, not ready")
    if generation != record.generation + 1:
        raise _OpError(f"lease generation must be {record.generation + 1}, not {generation}")
    return TaskRecord(
        record.task_id,
        record.key,
        LEASED,
        record.blob,
        record.available_at,
        record.max_attempts,
        record.attempts + 1,
        generation,
        worker,
        deadline,
    )


def _expire(state: State, staging: _Staging, op: dict[str, Any]) -> Record:
    record = _held(state, staging, op)
    assert record.deadline is not None  # a leased record always has one
    return _unleased(record, record.deadline)


def _ack(state: State, staging: _Staging, op: dict[str, Any]) -> Record:
    record = _held(state, staging, op)
    return Tombstone.of(
        record.task_id,
        record.key,
        record.blob[:_DIGEST_BYTES],
        record.available_at,
        record.max_attempts,
        record.attempts,
        record.generation,
    )


def _release(state: State, staging: _Staging, op: dict[str, Any]) -> Record:
    record = _held(state, staging, op)
    return _unleased(record, _int(op, "available_at"))


_Transition = Callable[[State, _Staging, dict[str, Any]], Record]

#: op name -> (its exact key set, the function that stages the task's new record).
_TRANSITIONS: dict[str, tuple[frozenset[str], _Transition]] = {
    "put": (OP_KEYS["put"], _put),
    "lease": (OP_KEYS["lease"], _lease),
    "expire": (OP_KEYS["expire"], _expire),
    "ack": (OP_KEYS["ack"], _ack),
    "release": (OP_KEYS["release"], _release),
}


def _stage(state: State, staging: _Staging, seq: int, index: int, op: object) -> Record:
    """The record op `index` of transaction `seq` leads to, or `InvalidTransaction`."""
    if type(op) is not dict:
        raise InvalidTransaction(f"transaction {seq} op {index}: an op must be a dict, not {type(op).__name__}")
    name = op.get("op")
    transition = _TRANSITIONS.get(name) if type(name) is str else None
    if transition is None:
        raise InvalidTransaction(f"transaction {seq} op {index}: unknown op {_describe(name)}")
    keys, stage = transition
    if op.keys() != keys:
        raise InvalidTransaction(
            f"transaction {seq} op {index} ({name}): keys must be exactly {sorted(keys)}, not {sorted(map(repr, op))}"
        )
    try:
        return stage(state, staging, op)
    except _OpError as exc:
        raise InvalidTransaction(f"transaction {seq} op {index} ({name}): {exc}") from None


def apply(state: State, tx: Mapping[str, Any], *, decoded: bool = False) -> None:
    """Apply transaction `tx` (``{"seq": S, "ops": [...]}``) to `state`, whole or not at all.

    Every op is checked first, against the state as the earlier ops of the
    same transaction would leave it (staged copies of the touched records);
    only when all are valid are the staged records committed. Any flaw
    raises `InvalidTransaction` naming the op and the reason, and leaves
    `state` exactly as it was.

    `decoded=True` says that `tx` is exactly what the JSON decoder returned
    for a frame (recovery): payloads then hold only exact JSON types,
    and are checked by `check_decoded_payload`, which reaches the same
    verdict and bytes as `check_payload` without walking the payload's types.
    The transitions and every other check are the same either way.
    """
    if type(tx) is not dict:
        raise InvalidTransaction(f"a transaction must be a dict, not {type(tx).__name__}")
    if len(tx) != 2 or "seq" not in tx or "ops" not in tx:  # exactly these two keys, without a keys view
        raise InvalidTransaction(f"a transaction has exactly the keys ops and seq, not {sorted(map(repr, tx))}")
    seq = tx["seq"]
    if type(seq) is not int or seq != state.last_seq + 1:
        raise InvalidTransaction(f"transaction sequence must be {state.last_seq + 1}, not {_describe(seq)}")
    ops = tx["ops"]
    if type(ops) is not list or not ops:
        raise InvalidTransaction(f"transaction {seq}: ops must be a non-empty list")
    if len(ops) == 1:
        # Nothing later in the transaction can see this op's result.
        op = ops[0]
        record = _stage(state, _NOTHING_STAGED[decoded], seq, 0, op)
        state._commit(((op["task"], record),), seq)  # a valid op's task is its task id
        return
    staging = _Staging(decoded)
    staged = staging.records
    for index, op in enumerate(ops):
        record = _stage(state, staging, seq, index, op)
        staged[op["task"]] = record
        if op["op"] == "put":
            staging.keys.add(op["key"])
    state._commit(staged.items(), seq)
