"""Periodic tasks: each firing is one `put` whose permanent key names the entry and the firing time.

An entry (`Periodic`) has a name, either an interval (`every`, clock units)
or a 5-field cron expression (UTC, see `cron.py`), a payload and
`max_attempts`. Its firing times are fixed by the entry alone, never by
when a scheduler started: an interval fires at the multiples of `every`
since the epoch, a cron expression at its minutes. A firing at time T is
``put(task_id=key, payload, key=key, available_at=T)`` with
``key = "cron:<name>:<T>"``. Since keys are permanent and the request is
the same wherever it is made, any number of schedulers (several workers,
restarts, overlapping deploys) enqueue each firing exactly once: the
first put writes it, every other is an identical retry that writes nothing.

Firings missed while no scheduler ran (`missed`):

- ``"once"`` (the default): when a scheduler starts, or wakes late, the
  latest firing that came due is enqueued (at most one per entry), the
  earlier ones are dropped. Like systemd's ``Persistent=true``: a nightly
  job whose night was missed runs once on start, not once per night.
  Only firings after the entry's earliest known firing in this store count
  as missed: a brand-new entry (no firing of it in the store) enqueues on
  its first start only a firing that is on time (at most `tolerance` late),
  so a nightly job added at 23:20 first runs at the next 03:00.
- ``"skip"``: only a firing at most `tolerance` late is enqueued; a firing
  missed for longer is dropped, and the entry waits for its next time.

A changed entry (another payload for the same name) makes its past
firings' puts `KeyConflict`: they are logged and skipped, never changed.
"""

from __future__ import annotations

import json
import math
import threading
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walqueue import KeyConflict
from walqueue.engine.validate import (
    MAX_INT,
    check_int,
    check_name,
    check_payload,
    check_priority,
    check_queue_name,
    check_record_fits,
)
from walqueue.format.canonical import canonical_str
from walqueue.protocol.source import QueueSource
from walqueue.worker.clock import Clock, seconds_until
from walqueue.worker.cron import Cron
from walqueue.worker.report import log

__all__ = ["MISSED", "Periodic", "Scheduler", "firing_key", "load_schedule"]

MISSED = ("once", "skip")
#: The scheduler's thread wakes at least this often (seconds), in case the wall clock jumps.
MAX_SLEEP_SECONDS = 60.0
#: How far a first look searches the store for an entry's earlier firings (pages per status, ids per page).
_KNOWN_PAGES = 4
_KNOWN_PAGE_SIZE = 256


def firing_key(name: str, fire_time: int) -> str:
    """The key (and task id) of entry `name`'s firing at `fire_time`: ``cron:<name>:<fire_time>``."""
    return f"cron:{name}:{fire_time}"


@dataclass(frozen=True)
class Periodic:
    """One schedule entry: `every` (clock units) or `cron` (5 fields, UTC), never both."""

    name: str
    payload: dict[str, Any]
    every: int | None = None
    cron: str | None = None
    missed: str = "once"
    max_attempts: int = 3
    #: The lane of its firings (lanes): checked as `Queue.put` checks them.
    queue: str = "default"
    priority: int = 0
    _cron: Cron | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a schedule entry's name is a non-empty str, not {self.name!r:.80}")
        if not isinstance(self.payload, dict):
            raise TypeError(f"schedule entry {self.name!r:.80}: the payload must be a dict (a JSON object)")
        if (self.every is None) == (self.cron is None):
            raise ValueError(f"schedule entry {self.name!r:.80} needs exactly one of 'every' and 'cron'")
        if self.every is not None and (type(self.every) is not int or not 1 <= self.every <= MAX_INT):
            raise ValueError(f"schedule entry {self.name!r:.80}: 'every' must be an int in 1..2**63-1 (clock units)")
        if self.cron is not None and type(self.cron) is not str:
            raise ValueError(f"schedule entry {self.name!r:.80}: 'cron' is a str of 5 fields, not {self.cron!r:.80}")
        if type(self.missed) is not str or self.missed not in MISSED:
            raise ValueError(f"schedule entry {self.name!r:.80}: 'missed' is one of {MISSED}, not {self.missed!r:.80}")
        try:
            check_queue_name(self.queue)
            check_priority(self.priority)
        except (TypeError, ValueError) as error:
            raise ValueError(f"schedule entry {self.name!r:.80}: {error}") from None
        self._check_storable()
        if self.cron is not None:
            object.__setattr__(self, "_cron", Cron(self.cron))

    def _check_storable(self) -> None:
        """Refuse now what every firing's put would refuse later: the scheduler must never meet a bad entry.

        The engine's own rules, applied to the longest key a firing can have
        (the time at its largest), the payload and `max_attempts`.
        """
        where = f"schedule entry {self.name!r:.80}"
        try:
            key = check_name(firing_key(self.name, MAX_INT), "the firing key cron:<name>:<time>")
            check_int(self.max_attempts, "max_attempts", 1)
            payload_json = check_payload(self.payload)
            key_json = canonical_str(key)
            check_record_fits(payload_json, key_json, key_json)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: {error}") from None

    def next_after(self, time: int, units_per_second: int) -> int:
        """The first firing strictly after `time` (clock units)."""
        if self._cron is None:
            assert self.every is not None
            return (time // self.every + 1) * self.every
        return self._cron.next_after(time // units_per_second) * units_per_second

    def latest_at_or_before(self, time: int, units_per_second: int) -> int | None:
        """The last firing at or before `time` (clock units), None if there is none."""
        if self._cron is None:
            assert self.every is not None
            return time // self.every * self.every if time >= 0 else None
        latest = self._cron.latest_at_or_before(time // units_per_second)
        return None if latest is None else latest * units_per_second


class Scheduler:
    """Puts the firings of `entries` as they come due; `tick(now)` is all the logic, the thread only waits."""

    def __init__(
        self,
        entries: Iterable[Periodic],
        source: QueueSource,
        *,
        units_per_second: int,
        tolerance: int | None = None,
    ) -> None:
        self.entries = list(entries)
        names = [entry.name for entry in self.entries]
        if len(set(names)) != len(names):
            raise ValueError(f"schedule entry names must be unique: {sorted(names)}")
        self.source = source
        self.units_per_second = units_per_second
        #: How late a firing may be and still count as on time under missed="skip" (default 60 s).
        self.tolerance = 60 * units_per_second if tolerance is None else tolerance
        self._looked: dict[str, int] = {}  # per entry: the time up to which firings were handled
        self.fired: list[str] = []  # the keys this scheduler put (written or already there), for tests and logs

    def tick(self, now: int) -> int | None:
        """Enqueue what is due at `now` (see the module's rules on missed firings); return the next due time."""
        due: int | None = None
        for entry in self.entries:
            latest = entry.latest_at_or_before(now, self.units_per_second)
            looked = self._looked.get(entry.name)
            came_due = latest is not None and (looked is None or latest > looked)
            if came_due and latest is not None and self._catches_up(entry, latest, now, first_look=looked is None):
                self._fire(entry, latest)
            self._looked[entry.name] = now
            following = entry.next_after(now, self.units_per_second)
            due = following if due is None else min(due, following)
        return due

    def _catches_up(self, entry: Periodic, latest: int, now: int, *, first_look: bool) -> bool:
        """Whether the latest firing that came due is enqueued (the module's rules on missed firings).

        On time (at most `tolerance` late) it always is. A late one is under
        ``missed="once"`` only if the entry already existed then: after this
        scheduler's first look, or on it if the store knows a firing of the
        entry at or before it. A brand-new entry has missed nothing.
        """
        if now - latest <= self.tolerance:
            return True
        if entry.missed != "once":
            return False
        return not first_look or self._known_since(entry, latest)

    def _known_since(self, entry: Periodic, latest: int) -> bool:
        """Whether the store holds a firing of `entry` at or before `latest` (the entry existed by then).

        The previous firing (the usual restart) and `latest` itself by `get`;
        then the ids after ``cron:<name>:`` in each
        status, a bounded number of pages.
        """
        previous = entry.latest_at_or_before(latest - 1, self.units_per_second)
        candidates = [latest] if previous is None else [latest, previous]
        if any(self.source.get(firing_key(entry.name, time)) is not None for time in candidates):
            return True
        page = self.source.page  # every source pages (`QueueSource`)
        prefix = firing_key(entry.name, 0)[:-1]
        for status in ("completed", "dead", "ready", "leased"):
            after = prefix
            for _ in range(_KNOWN_PAGES):
                ids = [task.task_id for task in page(status, after=after, limit=_KNOWN_PAGE_SIZE)]
                mine = [task_id for task_id in ids if task_id.startswith(prefix)]
                if any(rest.isdigit() and int(rest) <= latest for rest in (i[len(prefix) :] for i in mine)):
                    return True
                if len(mine) < len(ids) or len(ids) < _KNOWN_PAGE_SIZE:
                    break
                after = ids[-1]
        return False

    def _fire(self, entry: Periodic, fire_time: int) -> None:
        """Put one firing; logged as `fired` (INFO) only by the scheduler that found it not yet enqueued."""
        key = firing_key(entry.name, fire_time)
        there = self.source.get(key) is not None  # another scheduler (process, host) put it: its line, not ours
        try:
            if (entry.queue, entry.priority) == ("default", 0):  # a source without lanes works as before
                self.source.put(key, entry.payload, key=key, available_at=fire_time, max_attempts=entry.max_attempts)
            else:
                self.source.put(
                    key,
                    entry.payload,
                    key=key,
                    available_at=fire_time,
                    max_attempts=entry.max_attempts,
                    queue=entry.queue,
                    priority=entry.priority,
                )
        except KeyConflict as error:
            log.warning(
                "periodic %s: firing %s not enqueued: the entry changed since it was put (%s)", entry.name, key, error
            )
            return
        self.fired.append(key)
        if there:
            log.debug("periodic %s: %s was already enqueued", entry.name, key)
        else:
            log.info("periodic %s: fired %s", entry.name, key)

    def run_forever(self, clock: Clock, stop: threading.Event) -> None:
        """The thread's body: tick, then wait for the next firing (or `stop`); transient errors are retried."""
        while not stop.is_set():
            try:
                due = self.tick(clock())
            except OSError as error:  # the server is away: try again soon
                log.warning("periodic tasks: cannot reach the queue (%s); trying again in 1 s", error)
                stop.wait(1.0)
                continue
            wait = (
                MAX_SLEEP_SECONDS
                if due is None
                else min(MAX_SLEEP_SECONDS, seconds_until(due, clock(), self.units_per_second))
            )
            stop.wait(wait)


def entries_from(data: Any, units_per_second: int) -> list[Periodic]:
    """Schedule entries from parsed JSON/TOML: a list of tables, or ``{"task": [...]}``; `every` in seconds."""
    if isinstance(data, Mapping):
        data = data.get("task", data.get("tasks"))
    if not isinstance(data, list):
        raise ValueError("a schedule is a list of entries (JSON), or [[task]] tables (TOML)")
    entries = []
    for number, item in enumerate(data, 1):
        if not isinstance(item, Mapping):
            raise ValueError(f"schedule entry {number} is not a table/object")
        unknown = set(item) - {"name", "payload", "every", "cron", "missed", "max_attempts", "queue", "priority"}
        if unknown:
            raise ValueError(f"schedule entry {number}: unknown field(s) {sorted(unknown)}")
        every = item.get("every")
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int | float) or not 0 < every < math.inf
        ):
            raise ValueError(f"schedule entry {number}: 'every' is a number of seconds > 0, not {every!r:.80}")
        if every is not None and every * units_per_second > MAX_INT:
            raise ValueError(f"schedule entry {number}: 'every' of {every!r:.80} seconds is beyond 2**63-1 clock units")
        entries.append(
            Periodic(
                name=item.get("name", ""),
                payload=item.get("payload", {}),
                every=None if every is None else max(1, round(every * units_per_second)),
                cron=item.get("cron"),
                missed=item.get("missed", "once"),
                max_attempts=item.get("max_attempts", 3),
                queue=item.get("queue", "default"),
                priority=item.get("priority", 0),
            )
        )
    names = [entry.name for entry in entries]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"schedule entry names must be unique; given more than once: {twice}")
    return entries


def load_schedule(path: str | Path, units_per_second: int) -> list[Periodic]:
    """Read a schedule file: TOML (``.toml``, ``[[task]]`` tables) or JSON (a list); `ValueError` if bad."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read the schedule {path}: {error}") from error
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"the schedule {path} is not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {error}"
        ) from error
    try:
        return entries_from(data, units_per_second)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the schedule {path}: {error}") from error
