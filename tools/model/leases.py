"""The model's lease lifecycle: the reap, the fenced settles (ack, release, fail, give back, extend), redrive, cancel.

Each settle checks its arguments, then the lease's owner (`StaleLease`
otherwise), then commits one transaction; a recorded error is cut to its
bounds here (`_record_error`), as the engine cuts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from walqueue import Lease, StaleLease, WrongStatus
from walqueue.format.canonical import canonical_json

from .puts import PutCalls
from .rules import (
    ERROR_BOUNDS,
    INT_LIMIT,
    MAX_FRAME_BYTES,
    RECORD_WITHOUT_ERROR,
    TIGHT_ERROR_BOUNDS,
    check_error,
    check_int,
    check_name,
    cut,
)
from .state import lease_of


class LeaseCalls(PutCalls):
    """The calls on a leased task, the reap of expired leases, redrive and cancel."""

    def reap(self, now: int) -> int:
        """Only the reap half of `reserve(now=...)`; return how many transactions it wrote.

        Every leased task whose deadline <= `now` expires, in task-id order, in
        as few consecutive transactions as the frame bound allows (0 when
        nothing is due). Crash tests use it for the state between a
        reserve's reap and its lease.
        """
        check_int(now, "now", 0)
        written = 0
        expired = [r for _, r in sorted(self._tasks.items()) if r["status"] == "leased" and r["deadline"] <= now]
        batch: list[dict[str, Any]] = []
        body = self._next_body()
        for record in expired:
            op = {"op": "expire", "task": record["task"], "generation": record["generation"]}
            if not body.add(op):
                self._expire(batch)
                written += 1
                batch, body = [], self._next_body()
                body.add(op)
            batch.append(op)
        if batch:
            self._expire(batch)
            written += 1
        return written

    def _expire(self, ops: list[dict[str, Any]]) -> None:
        self._commit()
        for op in ops:
            record = self._tasks[op["task"]]
            old_deadline = record["deadline"]
            record["status"] = "dead" if record["attempts"] >= record["max_attempts"] else "ready"
            record["available_at"] = old_deadline
            record["last_error"] = {
                "type": "LeaseExpired",
                "message": f"worker {cut(record['worker'], 128)} did not ack, release or extend"
                f" lease {record['generation']} by its deadline {old_deadline}",
                "attempt": record["attempts"],
                "at": old_deadline,
            }
            record["worker"] = None
            record["deadline"] = None

    @staticmethod
    def _check_token(lease: object, now: object) -> None:
        if not isinstance(lease, Lease):
            raise TypeError(f"expected a Lease, not {type(lease).__name__}")
        check_int(now, "now", 0)

    def _owner_record(self, lease: Lease, now: int) -> dict[str, Any]:
        task_id, worker, generation = lease.task_id, lease.worker, lease.generation
        if type(task_id) is not str or type(worker) is not str or type(generation) is not int:
            raise StaleLease("the lease token is ill-typed")
        record = self._tasks.get(task_id)
        if (
            record is None
            or record["status"] != "leased"
            or record["worker"] != worker
            or record["generation"] != generation
            or now >= record["deadline"]
        ):
            raise StaleLease(f"the lease on {task_id!r} is not held")
        return record

    def ack(self, lease: Lease, *, now: int) -> None:
        """Complete the leased task; its payload is dropped (CONTRACT §2 ack)."""
        self._check_token(lease, now)
        record = self._owner_record(lease, now)
        self._commit()
        self._complete(record)

    def ack_many(self, leases: Iterable[Lease], *, now: int) -> None:
        """Complete every leased task in one transaction, or none: a stale or repeated lease refuses them all."""
        if isinstance(leases, (str, bytes, Mapping, Lease)) or not isinstance(leases, Iterable):
            raise TypeError(f"expected an iterable of Lease, not {type(leases).__name__}")
        tokens = list(leases)
        if not all(isinstance(lease, Lease) for lease in tokens):
            raise TypeError("expected Lease items")
        check_int(now, "now", 0)
        records: dict[str, dict[str, Any]] = {}
        for lease in tokens:
            record = self._owner_record(lease, now)
            if lease.task_id in records:
                raise StaleLease(f"{lease.task_id!r} is listed twice")
            records[lease.task_id] = record
        if records:
            self._commit()
        for record in records.values():
            self._complete(record)

    @staticmethod
    def _complete(record: dict[str, Any]) -> None:
        record["status"] = "completed"
        record["payload"] = None
        record["last_error"] = None
        record["worker"] = None
        record["deadline"] = None

    def _record_error(self, record: dict[str, Any], error: tuple[str, ...] | None, now: int) -> None:
        if error is None:
            return
        type_bound, message_bound = ERROR_BOUNDS
        last_error = {
            "type": cut(error[0], type_bound),
            "message": cut(error[1], message_bound),
            "attempt": record["attempts"],
        }
        last_error["at"] = now
        names = len(canonical_json(record["task"])) + len(canonical_json(record["key"]))
        member = len(b',"last_error":') + len(canonical_json(last_error))
        if len(canonical_json(record["payload"])) + names + RECORD_WITHOUT_ERROR + member > MAX_FRAME_BYTES:
            type_bound, message_bound = TIGHT_ERROR_BOUNDS
            last_error["type"], last_error["message"] = (cut(error[0], type_bound), cut(error[1], message_bound))
        if len(error) > 2:  # a traceback, kept when it fits beside the payload (never refused)
            with_traceback = {**last_error, "traceback": cut(error[2], 8192, tail=True)}
            member = len(b',"last_error":') + len(canonical_json(with_traceback))
            if len(canonical_json(record["payload"])) + names + RECORD_WITHOUT_ERROR + member <= MAX_FRAME_BYTES:
                last_error = with_traceback
        record["last_error"] = last_error

    def release(self, lease: Lease, *, now: int, delay: int = 0, error: Mapping[str, str] | None = None) -> None:
        """Give the task back, or bury it when its attempts are spent (CONTRACT §2 release)."""
        checked = check_error(error)
        self._check_token(lease, now)
        check_int(delay, "delay", 0)
        if now + delay >= INT_LIMIT:
            raise ValueError("now + delay must be below 2**63")
        record = self._owner_record(lease, now)
        self._commit()
        self._record_error(record, checked, now)
        record["status"] = "dead" if record["attempts"] >= record["max_attempts"] else "ready"
        record["available_at"] = now + delay
        record["worker"] = None
        record["deadline"] = None

    def fail(self, lease: Lease, *, now: int, error: Mapping[str, str] | None = None) -> None:
        """A permanent failure: the held task is dead at once, whatever its attempts."""
        checked = check_error(error)
        self._check_token(lease, now)
        record = self._owner_record(lease, now)
        self._commit()
        self._record_error(record, checked, now)
        record["status"] = "dead"
        record["worker"] = None
        record["deadline"] = None

    def give_back(self, lease: Lease, *, now: int) -> None:
        """Return a held lease never started: ready as before the lease, its attempt restored, fenced as ack."""
        self._check_token(lease, now)
        record = self._owner_record(lease, now)
        self._commit()
        record["status"] = "ready"
        record["attempts"] -= 1
        record["generation"] -= 1
        record["worker"] = None
        record["deadline"] = None

    def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease:
        """Move a held lease's deadline to now + lease_seconds, capped (extend); a new token."""
        self._check_token(lease, now)
        check_int(lease_seconds, "lease_seconds", 1)
        record = self._owner_record(lease, now)
        self._commit()
        record["deadline"] = min(now + lease_seconds, INT_LIMIT - 1)
        return lease_of(record)

    def _record_in(self, task_id: object, statuses: tuple[str, ...], call: str) -> dict[str, Any]:
        task_id = check_name(task_id, "task_id")
        record = self._tasks.get(task_id)
        if record is None:
            raise WrongStatus(f"{call}: no task {task_id!r}")
        if record["status"] not in statuses:
            raise WrongStatus(f"{call}: task {task_id!r} is {record['status']}")
        return record

    def redrive(self, task_id: str, *, available_at: int, extra_attempts: int = 1) -> None:
        """A dead task is ready again at `available_at` with `extra_attempts` more attempts (redrive)."""
        check_int(available_at, "available_at", 0)
        check_int(extra_attempts, "extra_attempts", 1)
        record = self._record_in(task_id, ("dead",), "redrive")
        if record["max_attempts"] + extra_attempts >= INT_LIMIT:
            raise ValueError("max_attempts + extra_attempts must be below 2**63")
        self._commit()
        record["status"] = "ready"
        record["available_at"] = available_at
        record["max_attempts"] += extra_attempts

    def cancel(self, task_id: str, *, error: Mapping[str, str] | None = None, now: int | None = None) -> None:
        """A ready or leased task becomes dead, its worker and deadline cleared, its reason recorded (cancel)."""
        checked = check_error(error)
        if now is not None:
            check_int(now, "now", 0)
        elif checked is not None:
            raise TypeError("cancel with an error needs now")
        record = self._record_in(task_id, ("ready", "leased"), "cancel")
        self._commit()
        self._record_error(record, checked, 0 if now is None else now)
        record["status"] = "dead"
        record["worker"] = None
        record["deadline"] = None
