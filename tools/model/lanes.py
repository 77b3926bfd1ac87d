"""The model's lanes (docs/DECISIONS.md §32): `reserve` by priority within each queue's budget, a queue's settings.

A queue's settings (concurrency, rate [n, window], paused) leave each
reserve a budget; `reserve` leases the due tasks of the named queues by
(-priority, available_at, task_id) within those budgets, after the reap.
`next_available_at` (a key of `stats()`) reads the same settings.
"""

from __future__ import annotations

from typing import Any

from walqueue import Lease

from .leases import LeaseCalls
from .rules import INT_LIMIT, STATUSES, UNCHANGED, check_int, check_name, check_queue
from .state import lease_of


class LaneCalls(LeaseCalls):
    """`reserve`, `configure_queue`, `queues` and the budget a queue's settings leave."""

    def reserve(
        self, worker: str, *, now: int, lease_seconds: int, limit: int = 1, queues: list[str] | None = None
    ) -> list[Lease]:
        """Reap expired leases (own transaction), then lease ready tasks (CONTRACT §2 reserve)."""
        check_name(worker, "worker")
        check_int(now, "now", 0)
        check_int(lease_seconds, "lease_seconds", 1)
        check_int(limit, "limit", 1)
        if queues is not None:
            if type(queues) not in (list, tuple):
                raise TypeError("queues must be a list or None")
            names = [check_queue(name, "queues item") for name in queues]
            if not names or len(set(names)) != len(names):
                raise ValueError("queues must name at least one queue, each once")
        # Capped at the end of time, so that reserve(now=2**63-1) can reap every lease.
        deadline = min(now + lease_seconds, INT_LIMIT - 1)

        self.reap(now)

        # The lease: ready and available in the named queues, by (-priority, available_at, task_id),
        # each queue within its budget (paused: none; concurrency; rate).
        ready = sorted(
            (
                r
                for r in self._tasks.values()
                if r["status"] == "ready" and r["available_at"] <= now and (queues is None or r["queue"] in queues)
            ),
            key=lambda r: (-r["priority"], r["available_at"], r["task"]),
        )
        budgets = {name: self._budget(name, now) for name in {r["queue"] for r in ready}}
        chosen: list[dict[str, Any]] = []
        body = self._next_body()
        for record in ready:
            if len(chosen) == limit:
                break
            if budgets[record["queue"]] <= 0:
                continue
            op = {
                "op": "lease",
                "task": record["task"],
                "worker": worker,
                "generation": record["generation"] + 1,
                "deadline": deadline,
            }
            if self._settings(record["queue"])["rate"] is not None:
                op["at"] = now
            if not body.add(op):
                break  # "leases as many as fit instead"
            budgets[record["queue"]] -= 1
            chosen.append(record)
        if not chosen:
            return []
        self._commit()
        leases = []
        for record in chosen:
            settings = self._settings(record["queue"])
            if settings["rate"] is not None:
                settings["recent"] = (settings["recent"] + [now])[-settings["rate"][0] :]
            record["status"] = "leased"
            record["worker"] = worker
            record["deadline"] = deadline
            record["attempts"] += 1
            record["generation"] += 1
            leases.append(lease_of(record))
        return leases

    def _settings(self, name: str) -> dict[str, Any]:
        return self._queues.get(name) or {"concurrency": None, "rate": None, "paused": False, "recent": []}

    def _leased(self, name: str) -> int:
        return sum(1 for r in self._tasks.values() if r["queue"] == name and r["status"] == "leased")

    def _budget(self, name: str, now: int) -> int:
        """How many leases queue `name` may grant at `now`: the sliding-log rule of the last n leases."""
        settings = self._settings(name)
        if settings["paused"]:
            return 0
        room = 2**63 if settings["concurrency"] is None else settings["concurrency"] - self._leased(name)
        if settings["rate"] is not None:
            n, window = settings["rate"]
            recent = settings["recent"]
            free = n - len(recent)
            for at in recent:
                if at + window > now:
                    break
                free += 1
            room = min(room, free)
        return room

    def configure_queue(
        self, name: str, *, concurrency: Any = UNCHANGED, rate: Any = UNCHANGED, paused: Any = UNCHANGED
    ) -> None:
        """Set a queue's settings: omitted unchanged, None clears; one transaction if anything changes."""
        check_queue(name, "name")
        if concurrency is not UNCHANGED and concurrency is not None:
            check_int(concurrency, "concurrency", 1)
        if rate is not UNCHANGED and rate is not None:
            if type(rate) not in (list, tuple) or len(rate) != 2:
                raise TypeError("rate must be a pair (n, window) or None")
            check_int(rate[0], "rate n", 1)
            check_int(rate[1], "rate window", 1)
            if rate[0] > 10_000:
                raise ValueError("rate n must be at most 10000")
        if paused is not UNCHANGED and type(paused) is not bool:
            raise TypeError("paused must be a bool")
        old = self._settings(name)
        new = {
            "concurrency": old["concurrency"] if concurrency is UNCHANGED else concurrency,
            "rate": old["rate"] if rate is UNCHANGED else (None if rate is None else [rate[0], rate[1]]),
            "paused": old["paused"] if paused is UNCHANGED else paused,
        }
        if new == {key: old[key] for key in new}:
            return
        new["recent"] = [] if new["rate"] is None else old["recent"][-new["rate"][0] :]
        self._commit()
        self._queues[name] = new

    def queues(self) -> list[dict[str, Any]]:
        """Every queue with a task or a setting, by name."""
        names = {r["queue"] for r in self._tasks.values()} | {
            name for name, s in self._queues.items() if s["concurrency"] or s["rate"] or s["paused"]
        }
        answer = []
        for name in sorted(names):
            settings = self._settings(name)
            counts = dict.fromkeys(STATUSES, 0)
            for record in self._tasks.values():
                if record["queue"] == name:
                    counts[record["status"]] += 1
            times = [r["available_at"] for r in self._tasks.values() if r["queue"] == name and r["status"] == "ready"]
            answer.append(
                {
                    "name": name,
                    "concurrency": settings["concurrency"],
                    "rate": settings["rate"],
                    "paused": settings["paused"],
                    "counts": counts,
                    "oldest_ready_at": min((t for t in times if t), default=None),  # undated (0) apart
                    "undated_ready": times.count(0),
                }
            )
        return answer

    def next_available_at(self) -> int | None:
        """`stats()["next_available_at"]`: when a reserve could next lease, or None.

        The smallest available_at of a ready task in a queue that is neither
        paused nor at its concurrency limit; for a queue whose rate window is
        full (its last n leases kept), no earlier than the window reopens.
        """
        times = []
        for record in self._tasks.values():
            if record["status"] != "ready":
                continue
            settings = self._settings(record["queue"])
            concurrency = settings["concurrency"]
            if settings["paused"] or (concurrency is not None and self._leased(record["queue"]) >= concurrency):
                continue
            time = record["available_at"]
            if settings["rate"] is not None and len(settings["recent"]) == settings["rate"][0]:
                time = max(time, settings["recent"][0] + settings["rate"][1])
            times.append(time)
        return min(times) if times else None
