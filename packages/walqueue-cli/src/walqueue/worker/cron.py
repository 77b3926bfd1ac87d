"""A 5-field cron expression (minute hour day-of-month month day-of-week), in UTC, standard library only.

Fields accept ``*``, numbers, ranges ``a-b``, steps ``*/n`` and ``a-b/n``,
lists ``a,b-c``, and English names for months (``jan``) and weekdays
(``mon``); weekday 0 and 7 are both Sunday. As in Vixie cron, when both
day-of-month and day-of-week are restricted (neither starts with ``*``), a
day matches if EITHER matches. The ``@hourly``-style shorthands are
accepted too. Times are UTC: a schedule means the same instants on every
host, which the exactly-once firing keys depend on.

Why our own parser and not `cronsim`, even when it is installed: every
scheduler sharing a queue must compute the very same firing times, since
the firing's key is made of its time; a result that depended on which
optional package a host happens to have could fire one job twice.

`Cron("0 3 * * *").next_after(t)` and `.latest_at_or_before(t)` work in
whole seconds since the epoch; `schedule.py` converts clock units.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

__all__ = ["Cron"]

#: English month names, fixed: `calendar.month_abbr` follows the process's locale (a handler's module may set it).
_MONTHS = {name: number for number, name in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
#: The days of each month in a leap year, the longest each can be.
_LONGEST_MONTHS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# (name, lowest, highest, names)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _WEEKDAYS),
)
#: How far a search goes before it gives up: a 29 February on a given weekday recurs within 28 years.
_SEARCH_DAYS = 366 * 29
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _value(text: str, field: str, low: int, high: int, names: dict[str, int]) -> int:
    number = names.get(text.lower())
    if number is None:
        if not text.isdigit() or not text.isascii():
            raise ValueError(f"cron {field}: {text!r} is not a number or a name")
        number = int(text)
    if not low <= number <= high:
        raise ValueError(f"cron {field}: {number} is outside {low}-{high}")
    return number


def _parse_field(text: str, field: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or not step_text.isascii() or int(step_text) < 1:
                raise ValueError(f"cron {field}: the step in {part!r} must be a number >= 1")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            first_text, _, last_text = span.partition("-")
            first = _value(first_text, field, low, high, names)
            last = _value(last_text, field, low, high, names)
            if first > last:
                raise ValueError(f"cron {field}: the range {span!r} runs backwards")
        else:
            first = _value(span, field, low, high, names)
            last = high if slash else first  # "5/15" means 5, 20, 35, 50
        values.update(range(first, last + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    """A parsed 5-field cron expression; `ValueError` names the field at fault."""

    expression: str

    def __post_init__(self) -> None:
        text = _SHORTHANDS.get(self.expression.strip().lower(), self.expression)
        parts = text.split()
        if len(parts) != 5:
            raise ValueError(f"a cron expression has 5 fields (minute hour day month weekday): {self.expression!r}")
        parsed = [_parse_field(part, *spec) for part, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(day % 7 for day in parsed[4])
        object.__setattr__(self, "_minutes", parsed[0])
        object.__setattr__(self, "_hours", parsed[1])
        object.__setattr__(self, "_days", parsed[2])
        object.__setattr__(self, "_months", parsed[3])
        object.__setattr__(self, "_weekdays", weekdays)
        object.__setattr__(self, "_any_day", parts[2].startswith("*"))
        object.__setattr__(self, "_any_weekday", parts[4].startswith("*"))
        longest = max(_LONGEST_MONTHS[month - 1] for month in parsed[3])
        if self._any_weekday and min(parsed[2]) > longest:
            raise ValueError(f"cron expression {self.expression!r} never fires (no such day in those months)")

    _minutes: frozenset[int] = field(init=False, repr=False, compare=False)
    _hours: frozenset[int] = field(init=False, repr=False, compare=False)
    _days: frozenset[int] = field(init=False, repr=False, compare=False)
    _months: frozenset[int] = field(init=False, repr=False, compare=False)
    _weekdays: frozenset[int] = field(init=False, repr=False, compare=False)
    _any_day: bool = field(init=False, repr=False, compare=False)
    _any_weekday: bool = field(init=False, repr=False, compare=False)

    def _day_matches(self, moment: datetime) -> bool:
        if moment.month not in self._months:
            return False
        day_ok = moment.day in self._days
        weekday_ok = (moment.isoweekday() % 7) in self._weekdays
        if self._any_day or self._any_weekday:
            return day_ok and weekday_ok
        return day_ok or weekday_ok

    def next_after(self, seconds: int) -> int:
        """The first firing strictly after `seconds` (since the epoch, UTC), in seconds."""
        moment = _EPOCH + timedelta(seconds=seconds - seconds % 60 + 60)
        limit = moment + timedelta(days=_SEARCH_DAYS)
        while moment < limit:
            if not self._day_matches(moment):
                moment = (moment + timedelta(days=1)).replace(hour=0, minute=0)
            elif moment.hour not in self._hours:
                moment = (moment + timedelta(hours=1)).replace(minute=0)
            elif moment.minute not in self._minutes:
                moment += timedelta(minutes=1)
            else:
                return int((moment - _EPOCH).total_seconds())
        raise ValueError(f"cron expression {self.expression!r} does not fire within {_SEARCH_DAYS} days")

    def latest_at_or_before(self, seconds: int) -> int | None:
        """The last firing at or before `seconds`, in seconds; None if none since the epoch (or the search bound)."""
        moment = _EPOCH + timedelta(seconds=seconds - seconds % 60)
        limit = max(_EPOCH, moment - timedelta(days=_SEARCH_DAYS))
        while moment >= limit:
            if not self._day_matches(moment):
                moment = moment.replace(hour=23, minute=59) - timedelta(days=1)
            elif moment.hour not in self._hours:
                moment = moment.replace(minute=59) - timedelta(hours=1)
            elif moment.minute not in self._minutes:
                moment -= timedelta(minutes=1)
            else:
                return int((moment - _EPOCH).total_seconds())
        return None
