"""The model's task functions' calls: `complete` (ack + result + follow-up puts, one transaction) and `result`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from walqueue import KeyConflict, Lease
from walqueue.format.canonical import canonical_json

from .lanes import LaneCalls
from .rules import check_int, check_payload, copy_json


class ResultCalls(LaneCalls):
    """`complete` and `result`: a result kept until its time to live passes."""

    def complete(
        self,
        lease: Lease,
        *,
        now: int,
        result: Any = None,
        result_ttl: int = 86_400_000,
        puts: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """The ack, then the puts as `put_many`, as ONE transaction; any refusal writes nothing."""
        if not isinstance(lease, Lease):
            raise TypeError("expected a Lease")
        check_int(now, "now", 0)
        ttl = check_int(result_ttl, "result_ttl", 1)
        if now + ttl > 2**63 - 1:
            raise ValueError("now + result_ttl is too large")
        if result is not None and len(canonical_json(check_payload({"v": result})["v"])) > 64 * 1024:
            raise ValueError("result too large")
        if isinstance(puts, (str, bytes, Mapping)) or not isinstance(puts, Iterable):
            raise TypeError("puts must be an iterable of mappings")
        items = list(puts)
        try:
            type(self)().put_many(items)  # the items' own checks come before the lease's
        except KeyConflict:
            pass  # a conflict among the items is judged after the lease, as the engine does
        self._check_token(lease, now)
        trial = self.clone()
        trial._complete(trial._owner_record(lease, now))
        trial.put_many(items)
        trial._last_seq = self._last_seq + 1
        self.__dict__ = trial.__dict__
        if result is not None:
            self._results[lease.task_id] = (now + ttl, copy_json(result))
            self._results = {task: kept for task, kept in self._results.items() if kept[0] > now}

    def result(self, task_id: str, *, now: int | None = None) -> dict[str, Any] | None:
        kept = self._results.get(task_id)
        if kept is None or (now is not None and kept[0] <= now):
            return None
        return {"value": copy_json(kept[1]), "expires": kept[0]}
