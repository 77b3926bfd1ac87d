"""Lanes: the ready order by queue and priority, and each queue's settings and limiter (docs/DECISIONS.md §32).

A lane is one (queue, priority) pair; its ready tasks are a heap of
``(available_at, task id)`` entries with lazy deletion, exactly as the one
ready heap of a store without lanes (heaps.py). `reserve` leases, among the
due ready tasks of the queues it may take from, the one of highest priority,
then smallest ``(available_at, task id)``.

Why two heaps of lanes: a reserve must not pay for lanes with nothing due,
nor for queues that are paused or at a limit. Each lane whose queue can
lease is seated in exactly one of them by its head (its first live entry):
`waiting`, keyed ``(available_at, task id)``, until a reserve's `now`
reaches the head; then `due`, keyed ``(-priority, available_at, task id)``.
A reserve promotes what became due (each lane once per head) and reads the
best lane off the top of `due`; a head the largest `now` yet has
reached is seated in `due` at once (the usual reserve+ack cycle: one pop
off the lane, one replace at the top of `due`, DECISIONS §57). A blocked
queue's lanes are in neither: blocking clears their seats (their heap
entries go stale), and the event that reopens the queue (a lease that
ends, a resume, a rate window that passes) seats them again.
A lane's seat is live only while it is the very tuple the lane points at
(``lane.entry is seat``), the heaps' rule of lazy deletion.

The limiter's state comes from the log alone: the concurrency count is the
number of the queue's leased tasks, and the rate limiter keeps the times
(the reserve's `now`, written in each lease op of a rate-limited queue as
``at``) of the queue's last n leases. A lease is allowed iff fewer than n
are kept or the one n leases back is at least a window old. Pure, like
state.py: no clock, no file, no thread.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from walqueue.engine.ages import ready_ages
from walqueue.engine.heaps import HEAP_SLACK
from walqueue.engine.records import COMPLETED, DEAD, LEASED, READY, STATUSES, priority_of, queue_of, view
from walqueue.engine.rows import ENTRY, LANE, STATUS, TASK_ID, HeapEntry, Row, Stored, lane_key, status_of
from walqueue.engine.validate import DEFAULT_QUEUE, MAX_INT, check_int, check_queue_name, check_rate

__all__ = ["Lane", "Lanes", "QueueIndex", "settings_from_json"]

#: A lane's seat: ``(available_at, task id, lane)`` in `waiting`, ``(-priority, available_at, task id, lane)`` in `due`.
Seat = tuple[Any, ...]


class Lane:
    """One (queue, priority): its heap of ready entries, how many of them are live, and its seat (or None)."""

    __slots__ = ("queue", "priority", "heap", "live", "entry", "key")

    def __init__(self, queue: QueueIndex, priority: int) -> None:
        self.queue = queue
        self.priority = priority
        #: The lane key its rows hold (rows.lane_key), at hand for snapshot loading.
        self.key = lane_key(queue.name, priority)
        self.heap: list[HeapEntry] = []
        self.live = 0
        self.entry: Seat | None = None


class QueueIndex:
    """One named queue: its lanes, its task counts by status, its settings and its rate limiter's lease times."""

    __slots__ = ("name", "lanes", "counts", "concurrency", "rate", "window", "paused", "recent", "rate_until",
                 "limited")  # fmt: skip

    def __init__(self, name: str) -> None:
        self.name = name
        self.lanes: dict[int, Lane] = {}
        self.counts = dict.fromkeys(STATUSES, 0)
        self.concurrency: int | None = None
        self.rate: int | None = None
        self.window = 0
        self.paused = False
        #: The `at` of the last `rate` leases, oldest first (only while a rate is set: () costs a queue nothing).
        self.recent: deque[int] | tuple[int, ...] = ()
        #: When the full rate window reopens (None: not blocked by the rate).
        self.rate_until: int | None = None
        #: `configured()`, kept by `Lanes.configure` (the one place settings change), read on every commit and reserve.
        self.limited = False

    def configured(self) -> bool:
        return self.paused or self.concurrency is not None or self.rate is not None

    def blocked(self) -> bool:
        """Whether the queue can lease nothing now, whatever the time (a rate block lifts with time)."""
        return (
            self.paused
            or self.rate_until is not None
            or (self.concurrency is not None and self.counts[LEASED] >= self.concurrency)
        )

    def budget(self, now: int) -> int:
        """How many leases this queue may grant at `now` (the concurrency slots and the rate's room)."""
        if self.paused:
            return 0
        room = MAX_INT if self.concurrency is None else self.concurrency - self.counts[LEASED]
        if self.rate is not None:
            free = self.rate - len(self.recent)
            for at in self.recent:  # the i-th new lease needs the lease n back to be a window old
                if at + self.window > now:
                    break
                free += 1
            room = min(room, free)
        return room

    def settings(self) -> dict[str, Any]:
        """The settings as `Queue.queues` answers them."""
        return {
            "concurrency": self.concurrency,
            "rate": None if self.rate is None else [self.rate, self.window],
            "paused": self.paused,
        }

    def oldest_ready(self, tasks: Mapping[str, Stored]) -> int | None:
        """The smallest available_at of this queue's ready tasks (a lane's live head), None if none."""
        heads = []
        for lane in self.lanes.values():
            heap = lane.heap
            while heap and tasks[heap[0][1]][ENTRY] is not heap[0]:
                heapq.heappop(heap)
            if heap:
                heads.append(heap[0][0])
        return min(heads, default=None)


class Lanes:
    """Every queue, every lane, and the two heaps of seated lanes (see the module's docstring)."""

    __slots__ = ("queues", "default", "default_lane", "waiting", "due", "rate_wait", "rate_open", "rate_full",
                 "lane_count", "now", "rated")  # fmt: skip

    def __init__(self) -> None:
        self.queues: dict[str, QueueIndex] = {}
        self.waiting: list[Seat] = []
        self.due: list[Seat] = []
        #: (time the window reopens, queue name) of rate-blocked queues (stale once `rate_until` differs).
        self.rate_wait: list[tuple[int, str]] = []
        #: Queues whose full rate window a reserve's `now` has passed, with ready tasks: a reserve looks at them.
        self.rate_open: set[str] = set()
        #: Every queue whose rate window is full (`rate_until` set), parked or open.
        self.rate_full: set[str] = set()
        #: Every queue with a rate (its leases carry ``at``): empty, a lease's check costs one test.
        self.rated: set[str] = set()
        self.lane_count = 0
        #: The largest `now` a reserve has promoted to (-1: none yet): a head it has reached is seated in `due` at once.
        self.now = -1
        self.default = self.queue(DEFAULT_QUEUE)
        self.default_lane = self.lane(self.default, 0)

    def queue(self, name: str) -> QueueIndex:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = QueueIndex(name)
        return q

    def lane(self, q: QueueIndex, priority: int) -> Lane:
        lane = q.lanes.get(priority)
        if lane is None:
            lane = q.lanes[priority] = Lane(q, priority)
            self.lane_count += 1
        return lane

    # -- seats ----------------------------------------------------------------

    def place(self, lane: Lane, available_at: int, task_id: str, now: int | None = None) -> None:
        """Seat `lane` by its head (available_at, task id): in `due` if `now` (None: `Lanes.now`) has reached it.

        An earlier reserve moves it back (`pick`). Its former seat, if at the top of that heap (the best
        lane's head was leased, the usual case), is replaced in one step rather than left for a later pop.
        """
        old = lane.entry
        if available_at <= (self.now if now is None else now):
            seat: Seat = (-lane.priority, available_at, task_id, lane)
            heap = self.due
        else:
            seat = (available_at, task_id, lane)
            heap = self.waiting
        lane.entry = seat
        if heap and heap[0] is old:
            heapq.heapreplace(heap, seat)
            return
        heapq.heappush(heap, seat)
        if len(heap) > 2 * self.lane_count + HEAP_SLACK:  # rebuilt in place: a running `pick` holds `due`
            heap[:] = [s for s in heap if s[-1].entry is s]
            heapq.heapify(heap)

    def _seat(self, lane: Lane, tasks: Mapping[str, Stored]) -> None:
        """Seat `lane` by its first live entry, or leave it unseated if it has none."""
        heap = lane.heap
        while heap:
            entry = heap[0]
            if tasks[entry[1]][ENTRY] is entry:
                self.place(lane, entry[0], entry[1])
                return
            heapq.heappop(heap)
        lane.entry = None

    def _reopen(self, q: QueueIndex, tasks: Mapping[str, Stored]) -> None:
        for lane in q.lanes.values():
            self._seat(lane, tasks)

    @staticmethod
    def _park(q: QueueIndex) -> None:
        for lane in q.lanes.values():
            lane.entry = None

    # -- the commit's side (state.State._commit) ------------------------------------

    def moved(self, old: Row | None, new: Stored, tasks: Mapping[str, Stored]) -> None:
        """Task `new` replaced `old` (None: it is new), already installed in `tasks` with its heap entry.

        `old` is a row: a completed task never changes. `new` is a row or, once acked, a tombstone.
        """
        row = new if old is None else old  # a task keeps its lane; an ack's tombstone would have to decode it
        if type(row) is not tuple:  # (created and completed in one transaction)
            q, priority = self.queue(queue_of(row)), priority_of(row)
        elif len(row) == LANE:  # (the default lane's rows have no lane item)
            q, priority = self.default, 0
        else:
            name, priority = row[LANE]
            q = self.queues.get(name) or self.queue(name)
        limited = q.limited
        before = limited and q.blocked()
        counts = q.counts
        if old is not None:
            was = old[STATUS]
            counts[was] -= 1
            if was == READY:
                lane = q.lanes[priority]
                lane.live -= 1
                seat = lane.entry
                if seat is not None and seat[-2] == old[TASK_ID]:
                    self._seat(lane, tasks)
        status = COMPLETED if type(new) is not tuple else new[STATUS]  # (rows.status_of, inlined: every commit's path)
        counts[status] += 1
        if status == READY:
            assert type(new) is tuple
            entry = new[ENTRY]
            lane = self.default_lane if q is self.default and priority == 0 else self.lane(q, priority)
            heapq.heappush(lane.heap, entry)
            lane.live += 1
            if len(lane.heap) > 2 * lane.live + HEAP_SLACK:
                lane.heap = [e for e in lane.heap if tasks[e[1]][ENTRY] is e]
                heapq.heapify(lane.heap)
            if not before:
                seat = lane.entry
                if seat is None or entry < (seat[-3], seat[-2]):
                    self.place(lane, entry[0], entry[1])
        if limited:  # (only a limited queue blocks, or has a rate window)
            if q.blocked() != before:
                if before:
                    self._reopen(q, tasks)
                else:
                    self._park(q)
            if q.rate_until is not None and (status == READY or (old is not None and old[STATUS] == LEASED)):
                heapq.heappush(self.rate_wait, (q.rate_until, q.name))  # a reserve past the window looks again

    def bulk_default(self) -> bool:
        """Whether new ready tasks of the default lane may go in through `added`: its queue has no setting or block."""
        q = self.default
        return not (q.paused or q.concurrency is not None or q.rate is not None or q.rate_until is not None)

    def added(self, entries: list[HeapEntry], tasks: Mapping[str, Stored]) -> None:
        """`moved(None, record)` for new ready tasks of the default lane at once, given their entries (in `tasks`).

        Only while `bulk_default()`: then nothing depends on the order they
        came in, so the heap takes them in one step (extended and heapified
        once they outnumber it) and the lane is seated once, by the smallest.
        """
        lane = self.default_lane
        heap = lane.heap
        if len(entries) > len(heap):
            heap.extend(entries)
            heapq.heapify(heap)
        else:
            for entry in entries:
                heapq.heappush(heap, entry)
        lane.live += len(entries)
        self.default.counts[READY] += len(entries)
        if len(heap) > 2 * lane.live + HEAP_SLACK:
            lane.heap = [e for e in heap if tasks[e[1]][ENTRY] is e]
            heapq.heapify(lane.heap)
        first = min(entries)
        seat = lane.entry
        if seat is None or first < (seat[-3], seat[-2]):
            self.place(lane, first[0], first[1])

    def leased_at(self, name: str, at: int) -> None:
        """A lease of queue `name` at `at` (its op's ``at``): the rate limiter keeps it; the window may close."""
        q = self.queues[name]
        recent = q.recent
        assert q.rate is not None and isinstance(recent, deque)
        recent.append(at)
        self._rate_block(q)

    def configure(
        self,
        name: str,
        concurrency: int | None,
        rate: tuple[int, int] | None,
        paused: bool,
        tasks: Mapping[str, Stored],
    ) -> None:
        """Install queue `name`'s settings (a configure op): the limiter keeps its lease times if the rate stays."""
        q = self.queue(name)
        before = q.blocked()
        q.concurrency = concurrency
        q.paused = paused
        if rate is None:
            q.rate, q.window, q.recent = None, 0, ()
            self.rated.discard(name)
        else:
            q.rate, q.window = rate
            q.recent = deque(q.recent, maxlen=q.rate)
            self.rated.add(name)
        q.limited = q.configured()
        self._rate_block(q)
        after = q.blocked()
        if before and not after:
            self._reopen(q, tasks)
        elif after:
            self._park(q)
        if q.rate_until is not None:  # a full window: a reserve past it looks again (after a resume, say)
            heapq.heappush(self.rate_wait, (q.rate_until, name))

    def _rate_block(self, q: QueueIndex) -> None:
        """`rate_until` from the lease times alone: set iff the last n leases are kept (the window is full)."""
        until = q.recent[0] + q.window if q.rate is not None and len(q.recent) == q.rate else None
        if until == q.rate_until:
            return
        q.rate_until = until
        self.rate_open.discard(q.name)
        if until is None:
            self.rate_full.discard(q.name)
        else:
            self.rate_full.add(q.name)
            heapq.heappush(self.rate_wait, (until, q.name))
            self._park(q)

    # -- the reserve's side -------------------------------------------------------

    def promote(self, now: int, tasks: Mapping[str, Stored]) -> None:
        """Reopen the rate windows `now` has passed; move the lanes whose head is due from `waiting` to `due`."""
        if now > self.now:
            self.now = now
        rate_wait = self.rate_wait
        while rate_wait and rate_wait[0][0] <= now:
            until, name = heapq.heappop(rate_wait)
            if self.queues[name].rate_until == until:
                self.rate_open.add(name)
        waiting = self.waiting
        due = self.due
        while waiting and waiting[0][0] <= now:
            seat = heapq.heappop(waiting)
            lane = seat[2]
            if lane.entry is seat:
                moved = (-lane.priority, seat[0], seat[1], lane)
                lane.entry = moved
                heapq.heappush(due, moved)
        if len(due) > 2 * self.lane_count + HEAP_SLACK:
            due[:] = [s for s in due if s[3].entry is s]
            heapq.heapify(due)

    def pick(self, now: int, limit: int, names: Iterable[str] | None, tasks: Mapping[str, Stored]) -> list[str]:
        """Up to `limit` due ready task ids, best first, within each queue's budget; changes no seat's meaning.

        The best is read off the top of its heap and popped only to look past
        it (so a reserve of one pops nothing); what was popped is pushed back,
        and the lease ops a reserve then commits move the lanes for real (`moved`).
        """
        waiting, rate_wait, due = self.waiting, self.rate_wait, self.due
        if now > self.now or (waiting and waiting[0][0] <= now) or (rate_wait and rate_wait[0][0] <= now):
            self.promote(now, tasks)  # (else it has nothing to do: the usual reserve at an unchanged `now`)
        candidates: list[Seat] = []
        if names is not None or self.rate_open:
            for name in list(self.rate_open) if names is None else names:
                q = self.queues.get(name)
                if q is None or q.paused or (q.concurrency is not None and q.counts[LEASED] >= q.concurrency):
                    self.rate_open.discard(name)  # a resume or a freed slot pushes it to `rate_wait` again
                elif names is None and not q.counts[READY]:
                    self.rate_open.discard(name)  # a put pushes it again
                else:
                    _seed(q, now, candidates, tasks)
        chosen: list[str] = []
        budgets: dict[str, int] = {}
        popped: list[tuple[list[Any], Any]] = []  # (heap, item) popped to look past it, pushed back at the end
        while True:
            if names is None:
                while due:
                    seat = due[0]
                    lane = seat[3]
                    if lane.entry is not seat:
                        heapq.heappop(due)
                    elif seat[1] > now:  # seated by a later `now` than this caller's
                        heapq.heappop(due)
                        self.place(lane, seat[1], seat[2], now)
                    else:
                        break
                top = due if due and (not candidates or due[0] < candidates[0]) else candidates
            else:
                top = candidates
            if not top:
                break
            item = top[0]
            lane = item[3]
            q = lane.queue
            if q.limited:  # (an unlimited queue's budget never runs out)
                budget = budgets.get(q.name)
                if budget is None:
                    budget = q.budget(now)
                budgets[q.name] = budget - 1
                if budget <= 0:
                    popped.append((top, heapq.heappop(top)))
                    continue
            chosen.append(item[2])
            if len(chosen) == limit:
                break
            popped.append((top, heapq.heappop(top)))
            following = _after(lane, item[2], tasks, popped)
            if following is not None and following[0] <= now:
                heapq.heappush(candidates, (-lane.priority, following[0], following[1], lane))
        for heap, entry in popped:
            heapq.heappush(heap, entry)
        return chosen

    def next_available_at(self, tasks: Mapping[str, Stored]) -> int | None:
        """The earliest time a reserve could lease something (None: nothing will, until a commit changes it)."""
        waiting = self.waiting
        while waiting and waiting[0][2].entry is not waiting[0]:
            heapq.heappop(waiting)
        times = [waiting[0][0]] if waiting else []
        times += [seat[1] for seat in self.due if seat[3].entry is seat]
        for name in self.rate_full:  # a full window: when it reopens, or the first ready time after that
            q = self.queues[name]
            oldest = q.oldest_ready(tasks)
            if oldest is not None and not q.paused and not (q.concurrency and q.counts[LEASED] >= q.concurrency):
                times.append(max(oldest, q.rate_until or 0))
        return min(times, default=None)

    # -- reads ------------------------------------------------------------------

    def ready_entries(self, name: str | None = None) -> list[HeapEntry]:
        """Every ready heap entry (live or stale) of queue `name`, or of every queue."""
        if name is None:
            if len(self.queues) == 1 and len(self.default.lanes) == 1:
                return list(self.default_lane.heap)
            return [entry for q in self.queues.values() for lane in q.lanes.values() for entry in lane.heap]
        q = self.queues.get(name)
        return [] if q is None else [entry for lane in q.lanes.values() for entry in lane.heap]

    def settings_json(self) -> dict[str, Any]:
        """What a snapshot keeps of the queues: each configured queue's settings and the limiter's lease times."""
        kept: dict[str, Any] = {}
        for name in sorted(self.queues):
            q = self.queues[name]
            if not q.configured():
                continue
            item: dict[str, Any] = {}
            if q.concurrency is not None:
                item["concurrency"] = q.concurrency
            if q.paused:
                item["paused"] = True
            if q.rate is not None:
                item["rate"] = [q.rate, q.window]
                item["recent"] = list(q.recent)
            kept[name] = item
        return kept

    def iter_queues(self) -> Iterator[QueueIndex]:
        return iter(self.queues.values())

    def settings_of(self, name: str) -> dict[str, Any]:
        q = self.queues.get(name)
        return {"concurrency": None, "rate": None, "paused": False} if q is None else q.settings()

    def describe(self, tasks: Mapping[str, Stored]) -> list[dict[str, Any]]:
        """Every queue that holds a task or has a setting, by name: settings, counts, oldest dated ready time.

        The ready tasks with no start (ages.py) are counted as ``undated_ready`` and left out of
        ``oldest_ready_at``, so that no age counts from 1970.
        """
        described = []
        for q in sorted(self.queues.values(), key=lambda q: q.name):
            if q.configured() or any(q.counts.values()):
                oldest, undated = ready_ages((lane.heap for lane in q.lanes.values()), tasks)
                item = {"name": q.name, **q.settings(), "counts": dict(q.counts), "oldest_ready_at": oldest}
                described.append({**item, "undated_ready": undated})
        return described

    def task_ids(
        self, tasks: Mapping[str, Stored], status: str | None, name: str, leased: Iterable[str], dead: Iterable[str]
    ) -> list[str]:
        """The ids of queue `name`'s tasks with `status` (None: all): its lanes for ready ones, a filter otherwise."""
        if status == READY:
            return [entry[1] for entry in self.ready_entries(name) if tasks[entry[1]][ENTRY] is entry]
        if status is None:
            return [task_id for task_id, record in tasks.items() if view(record).queue == name]
        ids = leased if status == LEASED else dead if status == DEAD else tasks
        return [
            task_id for task_id in ids if status_of(tasks[task_id]) == status and view(tasks[task_id]).queue == name
        ]

    def restore(self, settings: Mapping[str, Any], tasks: Mapping[str, Stored]) -> None:
        """Install a snapshot's settings (`settings_from_json`'s shape), the limiter's lease times with them."""
        for name, (concurrency, rate, paused, recent) in settings.items():
            self.queue(name).recent = deque(recent)
            self.configure(name, concurrency, rate, paused, tasks)

    def apply_configure(self, kind: Any, op: dict[str, Any], planned: bool, tasks: Mapping[str, Stored]) -> None:
        """Check a configure op (`TypeError`/`ValueError`) and install its settings."""
        if not kind.keys <= op.keys() <= kind.all_keys:
            optional = sorted(kind.all_keys - kind.keys)
            raise ValueError(f"keys must be exactly {sorted(kind.keys)} (and any of {optional})")
        if not planned:
            check_queue_name(op["queue"], "queue")
            kind.check_fields(op)
        if ("rate" in op) != ("window" in op):
            raise ValueError("rate and window are written together")
        rate = check_rate((op["rate"], op["window"])) if "rate" in op else None
        self.configure(op["queue"], op.get("concurrency"), rate, op.get("paused", False), tasks)


_SETTING_KEYS = frozenset({"concurrency", "paused", "rate", "recent"})


def settings_from_json(value: object) -> dict[str, tuple[int | None, tuple[int, int] | None, bool, list[int]]]:
    """A snapshot's ``queues`` member, checked: name -> (concurrency, rate, paused, recent); `ValueError` if flawed."""
    if type(value) is not dict or not value:
        raise ValueError("a snapshot's queues must be a non-empty object")
    settings = {}
    for name, item in value.items():
        check_queue_name(name, "snapshot queue")
        if type(item) is not dict or not item or not item.keys() <= _SETTING_KEYS:
            raise ValueError(f"snapshot queue {name!r}: keys must be among {sorted(_SETTING_KEYS)}")
        concurrency = item.get("concurrency")
        if concurrency is not None:
            check_int(concurrency, "snapshot queue concurrency", 1)
        paused = item.get("paused", False)
        if "paused" in item and paused is not True:
            raise ValueError(f"snapshot queue {name!r}: paused is written only as true")
        rate = None if "rate" not in item else check_rate(item["rate"])
        recent = item.get("recent", [])
        if ("recent" in item) != (rate is not None) or type(recent) is not list or len(recent) > (rate or (0, 0))[0]:
            raise ValueError(f"snapshot queue {name!r}: recent is a list of at most rate n lease times, with a rate")
        for at in recent:
            check_int(at, "snapshot queue recent time")
        settings[name] = (concurrency, rate, paused, recent)
    return settings


def _seed(q: QueueIndex, now: int, candidates: list[Seat], tasks: Mapping[str, Stored]) -> None:
    """Push the due head of each of `q`'s lanes onto `candidates` (a reserve named `q`, or its window passed)."""
    for lane in q.lanes.values():
        heap = lane.heap
        while heap and tasks[heap[0][1]][ENTRY] is not heap[0]:
            heapq.heappop(heap)
        if heap and heap[0][0] <= now:
            heapq.heappush(candidates, (-lane.priority, heap[0][0], heap[0][1], lane))


def _after(
    lane: Lane, task_id: str, tasks: Mapping[str, Stored], popped: list[tuple[list[Any], Any]]
) -> HeapEntry | None:
    """Take `task_id`, the live top of `lane`'s heap, off it (kept in `popped`); the live entry after it."""
    heap = lane.heap
    while heap:
        entry = heap[0]
        if tasks[entry[1]][ENTRY] is not entry:
            heapq.heappop(heap)
        elif entry[1] == task_id:
            popped.append((heap, heapq.heappop(heap)))
        else:
            found: HeapEntry = entry
            return found
    return None
