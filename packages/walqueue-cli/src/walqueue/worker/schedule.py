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
- ``"skip"``: only a firing at most `tolerance` late is enqueued; a firing
  missed for longer is dropped, and the entry waits for its next time.

A changed entry (another payload for the same name) makes its past
firings' puts `KeyConflict`: they are logged and skipped, never changed.
"""

from __future__ import annotations

import json
import threading
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walqueue import KeyConflict
from walqueue.engine.validate import check_priority, check_queue_name
from walqueue.worker.clock import Clock, seconds_until
from walqueue.worker.cron import Cron
from walqueue.worker.report import log
from walqueue.worker.source import Source

__all__ = ["MISSED", "Periodic", "Scheduler", "firing_key", "load_schedule"]

MISSED = ("once", "skip")
#: The scheduler's thread wakes at least this often (seconds), in case the wall clock jumps.
MAX_SLEEP_SECONDS = 60.0


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
            raise ValueError(f"a schedule entry's name is a non-empty str, not {self.name!r}")
        if not isinstance(self.payload, dict):
            raise TypeError(f"schedule entry {self.name!r}: the payload must be a dict (a JSON object)")
        if (self.every is None) == (self.cron is None):
            raise ValueError(f"schedule entry {self.name!r} needs exactly one of 'every' and 'cron'")
        if self.every is not None and (type(self.every) is not int or self.every < 1):
            raise ValueError(f"schedule entry {self.name!r}: 'every' must be an int >= 1 (clock units)")
        if self.missed not in MISSED:
            raise ValueError(f"schedule entry {self.name!r}: 'missed' is one of {MISSED}, not {self.missed!r}")
        try:
            check_queue_name(self.queue)
            check_priority(self.priority)
        except (TypeError, ValueError) as error:
            raise ValueError(f"schedule entry {self.name!r}: {error}") from None
        if self.cron is not None:
            object.__setattr__(self, "_cron", Cron(self.cron))

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
        source: Source,
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
            if came_due and latest is not None and (entry.missed == "once" or now - latest <= self.tolerance):
                self._fire(entry, latest)
            self._looked[entry.name] = now
            following = entry.next_after(now, self.units_per_second)
            due = following if due is None else min(due, following)
        return due

    def _fire(self, entry: Periodic, fire_time: int) -> None:
        key = firing_key(entry.name, fire_time)
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
        if every is not None and (isinstance(every, bool) or not isinstance(every, int | float) or every <= 0):
            raise ValueError(f"schedule entry {number}: 'every' is a number of seconds > 0, not {every!r}")
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
