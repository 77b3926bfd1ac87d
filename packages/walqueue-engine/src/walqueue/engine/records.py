"""Task records: what a stored task answers by name, how a completed one is packed, and the rules on both.

A record is the complete state of one task (CONTRACT §3's snapshot record).
The state stores each task in the shape rows.py defines: a not-completed
task as a row, an exact tuple read by position (its payload kept as
canonical JSON bytes behind its identity digest, so a snapshot splices the
stored bytes without re-encoding them); a completed one, kept forever (its
key must keep answering retries), packed into exact bytes (`Tombstone`'s
layout). Neither is ever tracked by the cyclic collector once it has seen
it. Rows are never changed once committed to a `State`: a transition builds
a new one, so a heap entry that points at an old row is stale at once.

`view` turns either into a record that answers the same fields by name
(`TaskRecord`, `Tombstone`): what every reader off the hot path uses. A
task's last error rides in its row with its traceback (`StoredError`); a
completed task has none, so a tombstone costs nothing more for it.
"""

from __future__ import annotations

import hashlib
from operator import itemgetter
from typing import Any

from walqueue.engine import rows
from walqueue.engine.types import LastError, Task, WalQueueError
from walqueue.engine.validate import DEFAULT_QUEUE, LAST_ERROR_ROOM, check_last_error_fits, cut_text
from walqueue.format.canonical import canonical_str, parse_json

__all__ = [
    "COMPLETED",
    "DEAD",
    "LEASED",
    "READY",
    "STATUSES",
    "InvalidTransaction",
    "Record",
    "TaskRecord",
    "Tombstone",
    "decode_payload",
    "check_error_fits",
    "check_status_filter",
    "expiry_error",
    "identity_digest",
    "last_error_json",
    "last_error_member_size",
    "row_json",
    "pack_tombstone",
    "tombstone_bytes",
    "view",
    "queue_of",
    "priority_of",
]

#: The statuses, as every layer above has long imported them from here (rows.py defines them).
READY, LEASED, COMPLETED, DEAD, STATUSES = rows.READY, rows.LEASED, rows.COMPLETED, rows.DEAD, rows.STATUSES


def check_status_filter(status: object) -> None:
    """`ValueError` unless `status` is in `STATUSES` or None: `Queue.tasks`'s filter, which clients check too."""
    if status is not None and (type(status) is not str or status not in rows.STATUSES):
        raise ValueError(f"status must be one of {', '.join(rows.STATUSES)} or None, not {status!r}")


class InvalidTransaction(WalQueueError, ValueError):
    """A transaction (or snapshot record) that the state machine refuses; the state is untouched.

    Recovery turns it into `CorruptStore`: a log written by WALQueue never
    holds one.
    """


def identity_digest(
    task_json: bytes,
    payload_json: bytes,
    available_at: int,
    max_attempts: int,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
) -> bytes:
    """SHA-256 of the canonical JSON of a put's identity (CONTRACT §2), from its canonical task id and payload.

    The identity object is ``{"available_at":A,"max_attempts":M,"payload":P,
    "task":T}``, with ``"priority"`` and ``"queue"`` only when they differ
    from 0 and ``"default"`` (so a put without lanes has today's identity);
    two puts are identical iff these bytes are. Splices them into the identity object (keys in sorted order) instead of
    encoding the payload a second time; the tests prove it byte-equal to
    `canonical_json` of that object.
    """
    text = b'{"available_at":%d,"max_attempts":%d,"payload":%b,%b"task":%b}' % (
        available_at,
        max_attempts,
        payload_json,
        lane_members(queue, priority),
        task_json,
    )
    return hashlib.sha256(text).digest()


def lane_members(queue: str, priority: int) -> bytes:
    """``"priority":N,"queue":Q,`` with each member omitted at its default (0, ``"default"``): b"" for both."""
    if queue is DEFAULT_QUEUE or queue == DEFAULT_QUEUE:
        return b"" if priority == 0 else b'"priority":%d,' % priority
    return b'%b"queue":%b,' % (b"" if priority == 0 else b'"priority":%d,' % priority, canonical_str(queue))


def decode_payload(digest_and_payload: bytes) -> Any:
    """A fresh decoded copy of the payload stored after the digest in `digest_and_payload`.

    `parse_json` rather than `json.loads`: the stored bytes are canonical,
    so its scanner path takes them whole, with neither `json.loads`'
    encoding detection nor its whitespace regex.
    """
    return parse_json(digest_and_payload[rows.DIGEST_BYTES :])


class _RecordView:
    """What every stored task answers, whether it is a `TaskRecord` (of either lane shape) or a packed `Tombstone`.

    The shapes exist for memory (a completed task is kept forever, so it
    must be small; a task in the default lane carries no lane), not for
    meaning: every shape exposes the same fourteen fields, and everything
    that reads a task goes through them (`fields()` lists them in order).
    """

    __slots__ = ()

    # What a row stores, in its order (rows.FIELDS: positions TASK_ID..DEADLINE).
    task_id: str
    key: str
    status: str
    digest_and_payload: bytes
    available_at: int
    max_attempts: int
    attempts: int
    worker: str | None
    deadline: int | None
    # What is derived from the stored fields, never stored on its own.
    #: The lease's number: always equal to `attempts` (rows.GENERATION is rows.ATTEMPTS).
    generation: int
    #: The last error (`ErrorFields`), None: none recorded.
    last_error: rows.ErrorFields | None
    #: The last error's traceback (the "traceback" op, a format extension); None: none recorded.
    traceback: str | None
    #: The task's queue and priority (lanes): the shared DEFAULT_QUEUE string and 0 unless put elsewhere.
    queue: str
    priority: int

    def fields(self) -> tuple[object, ...]:
        """Everything that is state (not `entry`, which is only an index position)."""
        return (
            self.task_id,
            self.key,
            self.status,
            self.digest_and_payload,
            self.available_at,
            self.max_attempts,
            self.attempts,
            self.generation,
            self.worker,
            self.deadline,
            self.last_error,
            self.traceback,
            self.queue,
            self.priority,
        )

    @property
    def identity(self) -> bytes:
        """The 32-byte identity digest of the task's original put."""
        return self.digest_and_payload[: rows.DIGEST_BYTES]

    def payload_json(self) -> bytes:
        """The payload's canonical JSON, ``b"null"`` once completed."""
        return self.digest_and_payload[rows.DIGEST_BYTES :] or b"null"

    def to_task(self) -> Task:
        payload = decode_payload(self.digest_and_payload) if self.status != rows.COMPLETED else None
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
            last_error=None if self.last_error is None else LastError(*self.last_error, traceback=self.traceback),
            queue=self.queue,
            priority=self.priority,
        )

    def record_json(self) -> bytes:
        """This task's snapshot record (CONTRACT §3) as canonical JSON (`row_json`)."""
        return row_json(self.row())

    def row(self) -> rows.Row:
        """The task's fields in a `Row`'s layout."""
        raise NotImplementedError


def row_json(row: rows.Row) -> bytes:
    """The snapshot record (CONTRACT §3) of the task of `row`, as canonical JSON, splicing the stored payload bytes.

    Read by position: compaction writes one per not-completed task. A task
    without a last error has no ``last_error`` key at all, so its record is
    byte for byte what a version without last errors writes.
    """
    deadline, worker, error, data, lane = (
        row[rows.DEADLINE],
        row[rows.WORKER],
        row[rows.ERROR],
        row[rows.DATA],
        row[rows.LANE :],
    )
    lane = lane[0] if lane else lane
    return (
        b'{"attempts":%d,"available_at":%d,"deadline":%b,"generation":%d,"identity":"%b","key":%b,%b'
        b'"max_attempts":%d,"payload":%b,%b"status":"%b","task":%b,%b"worker":%b}'
        % (
            row[rows.ATTEMPTS],
            row[rows.AVAILABLE_AT],
            b"null" if deadline is None else b"%d" % deadline,
            row[rows.GENERATION],
            data[: rows.DIGEST_BYTES].hex().encode("ascii"),
            canonical_str(row[rows.KEY]),
            b"" if error is None else b'"last_error":%b,' % last_error_json(error[:4]),
            row[rows.MAX_ATTEMPTS],
            data[rows.DIGEST_BYTES :] or b"null",
            lane_members(*lane) if lane else b"",
            row[rows.STATUS].encode("ascii"),
            canonical_str(row[rows.TASK_ID]),
            b"" if error is None or len(error) == 4 else b'"traceback":%b,' % canonical_str(error[4]),
            b"null" if worker is None else canonical_str(worker),
        )
    )


def queue_of(stored: rows.Stored) -> str:
    """The task's queue: a lane row's item, DEFAULT_QUEUE for a default-lane row, decoded from a tombstone."""
    if isinstance(stored, tuple):
        queue: str = stored[rows.LANE][0] if len(stored) > rows.LANE else DEFAULT_QUEUE
        return queue
    return _tombstone_queue(stored)


def _tombstone_queue(stored: bytes) -> str:
    """A tombstone's queue, read from its header alone (a counter by queue reads it at every ack of a lane task)."""
    colon = stored.index(b":", rows.DIGEST_BYTES)
    numbers = stored[rows.DIGEST_BYTES : colon].split()
    if len(numbers) == 4:
        return DEFAULT_QUEUE
    start = colon + 1 + int(numbers[3])
    return stored[start : start + int(numbers[5])].decode("ascii")


def priority_of(stored: rows.Stored) -> int:
    """The task's priority (see `queue_of`)."""
    if isinstance(stored, tuple):
        priority: int = stored[rows.LANE][1] if len(stored) > rows.LANE else 0
        return priority
    return Tombstone(stored).priority


class TaskRecord(_RecordView, tuple[Any, ...]):
    """A view of a not-completed task's `Row` that answers its fields by name (`view` makes it).

    A copy of the row's items, for reading: the state stores the row
    itself, an exact tuple the cyclic collector soon stops tracking (rows.py;
    an instance of any class, a tuple subclass too, is tracked
    for as long as it lives), so a full collection does not walk the tasks.
    """

    __slots__ = ()

    # Every field a row holds by position answers by its name (set below the class, from rows.FIELDS).
    stored_error: rows.StoredError | None
    entry: rows.HeapEntry | None

    @property
    def last_error(self) -> rows.ErrorFields | None:  # type: ignore[override]
        error: rows.StoredError | None = self[rows.ERROR]
        return error if error is None or len(error) == 4 else error[:4]

    @property
    def traceback(self) -> str | None:  # type: ignore[override]
        error: rows.StoredError | None = self[rows.ERROR]
        return None if error is None or len(error) == 4 else error[4]

    @property
    def queue(self) -> str:  # type: ignore[override]
        return queue_of(self)

    @property
    def priority(self) -> int:  # type: ignore[override]
        return priority_of(self)

    def row(self) -> rows.Row:
        return self

    def __repr__(self) -> str:
        return f"TaskRecord{self.fields()!r}"


class _PackedNumber:
    """A counter of a `Tombstone`, decoded on access: item `index` of its `_numbers()`."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __get__(self, tombstone: Tombstone, owner: type[Tombstone] | None = None) -> int:
        return tombstone._numbers()[self.index]


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
    `tombstone_bytes` refuses to pack a record that breaks the rule. The fields
    are decoded on access, which is rare: retries, reads and snapshots.
    """

    __slots__ = ()

    # A completed task never has these (class attributes, not storage).
    status = rows.COMPLETED
    worker = None
    deadline = None
    last_error = None
    traceback = None
    stored_error = None
    entry = None

    def _numbers(self) -> tuple[int, ...]:
        """(available_at, max_attempts, attempts, task id length, where the task id starts, priority, queue length)."""
        colon = self.index(b":", rows.DIGEST_BYTES)
        numbers = list(map(int, self[rows.DIGEST_BYTES : colon].split()))
        if len(numbers) == 4:
            numbers += [0, 0]
        available_at, max_attempts, attempts, task_len, priority, queue_len = numbers
        return available_at, max_attempts, attempts, task_len, colon + 1, priority, queue_len

    @property
    def digest_and_payload(self) -> bytes:  # type: ignore[override]
        return bytes(self[: rows.DIGEST_BYTES])

    @property
    def task_id(self) -> str:  # type: ignore[override]
        task_len, start = self._numbers()[3:5]
        return self[start : start + task_len].decode("utf-8")

    @property
    def key(self) -> str:  # type: ignore[override]
        _, _, _, task_len, start, _, queue_len = self._numbers()
        key = self[start + task_len + queue_len :]
        return key.decode("utf-8") if key else self[start : start + task_len].decode("utf-8")

    @property
    def queue(self) -> str:  # type: ignore[override]
        _, _, _, task_len, start, _, queue_len = self._numbers()
        return self[start + task_len : start + task_len + queue_len].decode("ascii") if queue_len else DEFAULT_QUEUE

    available_at = _PackedNumber(0)
    max_attempts = _PackedNumber(1)
    attempts = _PackedNumber(2)
    generation = _PackedNumber(2)  # always equal to attempts (`of` refuses a record where it is not)
    priority = _PackedNumber(5)

    def row(self) -> rows.Row:
        """A row of this completed task's fields (its payload is gone: the digest alone)."""
        fields = (self.task_id, self.key, rows.COMPLETED, self.digest_and_payload, self.available_at, self.max_attempts)
        return rows.new_row(*fields, self.attempts, None, None, None, self.queue, self.priority)

    def __repr__(self) -> str:
        return f"Tombstone{self.fields()!r}"


Record = TaskRecord | Tombstone


for _index, _name in enumerate(rows.FIELDS):
    setattr(TaskRecord, _name, property(itemgetter(_index)))
TaskRecord.generation = property(itemgetter(rows.GENERATION))  # type: ignore[assignment]  # (= attempts)


def view(stored: rows.Stored) -> Record:
    """The stored task `stored` (a row or a tombstone's bytes) as a record that answers its fields by name."""
    return Tombstone(stored) if type(stored) is bytes else TaskRecord(stored)


def pack_tombstone(row: rows.Row) -> bytes:
    """A completed task's tombstone (exact bytes, as `State.tasks` stores it), from the row its ack completes.

    `_packed` without `tombstone_bytes`' checks: a row's digest has its 32 bytes and its generation is its
    attempts (the ack's path, once per cycle: DECISIONS §61). A lane's part is made once per lane key.
    """
    if len(row) > rows.LANE:
        lane_key = row[rows.LANE]
        tail = _LANE_TAILS.get(lane_key)
        if tail is None:
            tail = _LANE_TAILS[lane_key] = _lane_tail(*lane_key)
    else:
        tail = _NO_TAIL
    return _packed(row[rows.TASK_ID], row[rows.KEY], row[rows.DATA][: rows.DIGEST_BYTES], row[rows.AVAILABLE_AT],
                   row[rows.MAX_ATTEMPTS], row[rows.ATTEMPTS], tail)  # fmt: skip


def tombstone_bytes(
    task_id: str,
    key: str,
    digest: bytes,
    counters: tuple[int, int, int, int],
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
) -> bytes:
    """A completed task packed in `Tombstone`'s layout (exact bytes, as `State.tasks` stores it).

    `counters`: (available_at, max_attempts, attempts, generation). A lane
    other than the default adds `` <priority> <queue length>`` and the queue.
    """
    available_at, max_attempts, attempts, generation = counters
    if generation != attempts:
        raise ValueError(f"generation {generation} differs from attempts {attempts}")
    if len(digest) != rows.DIGEST_BYTES:
        raise ValueError(f"an identity digest has {rows.DIGEST_BYTES} bytes, not {len(digest)}")
    return _packed(task_id, key, digest, available_at, max_attempts, attempts, _lane_tail(queue, priority))


#: A tombstone's lane part, ``(b" <priority> <queue length>", queue)``: nothing for the default lane.
_NO_TAIL = (b"", b"")
#: The lane part of each lane key a process has packed (bounded as rows' lane keys are: one a lane).
_LANE_TAILS: dict[tuple[str, int], tuple[bytes, bytes]] = {}


def _lane_tail(queue: str, priority: int) -> tuple[bytes, bytes]:
    if priority == 0 and queue == DEFAULT_QUEUE:
        return _NO_TAIL
    return b" %d %d" % (priority, len(queue)), queue.encode("ascii")


def _packed(
    task_id: str,
    key: str,
    digest: bytes,
    available_at: int,
    max_attempts: int,
    attempts: int,
    tail: tuple[bytes, bytes],
) -> bytes:
    """`Tombstone`'s layout of these fields, which the callers have checked (`tail`: `_lane_tail`'s)."""
    task_bytes = task_id.encode("utf-8")
    return b"%b%d %d %d %d%b:%b%b%b" % (
        digest,
        available_at,
        max_attempts,
        attempts,
        len(task_bytes),
        tail[0],
        task_bytes,
        tail[1],
        b"" if key == task_id else key.encode("utf-8"),
    )


def last_error_json(last_error: rows.ErrorFields) -> bytes:
    """The canonical JSON of a stored last error: ``{"at":N,"attempt":N,"message":M,"type":Y}``."""
    error_type, message, attempt, at = last_error
    return b'{"at":%d,"attempt":%d,"message":%b,"type":%b}' % (
        at,
        attempt,
        canonical_str(message),
        canonical_str(error_type),
    )


def last_error_member_size(last_error: rows.ErrorFields, traceback: str | None = None) -> int:
    """The bytes ``,"last_error":{...}`` (and ``,"traceback":X``, its traceback's) add to a snapshot record.

    validate.check_last_error_fits measures it.
    """
    size = len(b',"last_error":') + len(last_error_json(last_error))
    return size if traceback is None else size + len(b',"traceback":') + len(canonical_str(traceback))


def check_error_fits(row: rows.Row, last_error: rows.ErrorFields, traceback: str | None = None) -> None:
    """`ValueError` unless the task of `row` with `last_error` still fits a snapshot frame in any status.

    Only a member longer than `LAST_ERROR_ROOM` (the slack every accepted
    task has) is measured against the payload and names.
    """
    size = last_error_member_size(last_error, traceback)
    if size > LAST_ERROR_ROOM:
        task_id, key = row[rows.TASK_ID], row[rows.KEY]
        task_json = canonical_str(task_id)
        key_json = task_json if key == task_id else canonical_str(key)
        check_last_error_fits(row[rows.DATA][rows.DIGEST_BYTES :] or b"null", task_json, key_json, size)


#: The UTF-8 bytes of a worker name that an expiry's message quotes (cut with a marker beyond them).
EXPIRY_WORKER_BYTES = 128


def expiry_error(row: rows.Row) -> rows.ErrorFields:
    """The last error an expire op records for the leased task of `row`, derived from the row alone.

    Nothing is written for it: the expire op is what it always was, and
    replaying it gives the same error, so a reap costs no more bytes. The
    time is the lease's deadline (the log holds no clock). The worker name
    is cut to `EXPIRY_WORKER_BYTES`, so that the error fits in any record
    (validate.LAST_ERROR_ROOM): at most about 1,000 bytes of JSON.
    """
    worker, deadline = row[rows.WORKER], row[rows.DEADLINE]
    assert worker is not None and deadline is not None  # a leased record
    message = (
        f"worker {cut_text(worker, EXPIRY_WORKER_BYTES)} did not ack, release or extend"
        f" lease {row[rows.GENERATION]} by its deadline {deadline}"
    )
    return ("LeaseExpired", message, row[rows.ATTEMPTS], deadline)
