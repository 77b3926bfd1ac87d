"""Periodic tasks: each firing is one put keyed ``cron:<name>:<time>``, enqueued once however many schedulers run.

`Scheduler.tick(now)` with a fake clock against a real queue; a "restart"
is a new `Scheduler` (it remembers nothing), which is exactly what a new
process has.
"""

from __future__ import annotations

import calendar
import json
import logging
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from worker_rig import FakeClock

from walqueue import Queue
from walqueue.worker import Periodic, firing_key
from walqueue.worker.cron import Cron
from walqueue.worker.schedule import Scheduler, load_schedule

MINUTE = 60_000  # milliseconds


def fired(queue: Queue) -> list[str]:
    return [task.task_id for task in queue.tasks() if task.task_id.startswith("cron:")]


def test_an_interval_fires_at_its_multiples_each_as_a_put_with_its_permanent_key(queue: Queue) -> None:
    scheduler = Scheduler([Periodic("tick", {"kind": "tick"}, every=1_000)], queue, units_per_second=1_000)
    assert scheduler.tick(10_500) == 11_000  # the first look enqueues the latest firing (missed="once")
    assert scheduler.tick(10_999) == 11_000
    assert scheduler.tick(11_000) == 12_000
    scheduler.tick(12_300)
    assert fired(queue) == ["cron:tick:10000", "cron:tick:11000", "cron:tick:12000"]
    task = queue.get("cron:tick:11000")
    assert task is not None and (task.key, task.available_at, task.payload) == (
        "cron:tick:11000",
        11_000,
        {"kind": "tick"},
    )


def test_firings_missed_while_nothing_ran_are_enqueued_once_after_a_restart(queue: Queue) -> None:
    entry = Periodic("tick", {}, every=1_000, missed="once")
    first = Scheduler([entry], queue, units_per_second=1_000)
    first.tick(10_000)
    first.tick(11_000)
    seq = queue.last_seq
    # Down from 11,000 to 15,200: the firings at 12,000 .. 15,000 were missed; only the latest runs.
    restarted = Scheduler([entry], queue, units_per_second=1_000)
    restarted.tick(15_200)
    assert fired(queue) == ["cron:tick:10000", "cron:tick:11000", "cron:tick:15000"]
    assert queue.last_seq == seq + 1
    # A restart within the same period puts the same firing again: an identical retry, nothing written.
    again = Scheduler([entry], queue, units_per_second=1_000)
    again.tick(15_900)
    assert queue.last_seq == seq + 1 and again.fired == ["cron:tick:15000"]


def test_with_skip_a_firing_later_than_the_tolerance_is_dropped(queue: Queue) -> None:
    entry = Periodic("tick", {}, every=1_000, missed="skip")
    restarted = Scheduler([entry], queue, units_per_second=1_000, tolerance=100)
    assert restarted.tick(15_200) == 16_000  # 15,000 is 200 late: skipped
    restarted.tick(16_050)  # 50 late: on time
    assert fired(queue) == ["cron:tick:16000"]


def test_any_number_of_overlapping_schedulers_enqueue_each_firing_exactly_once(queue: Queue) -> None:
    entry = Periodic("report", {"kind": "report"}, cron="*/5 * * * *")
    schedulers = [Scheduler([entry], queue, units_per_second=1_000) for _ in range(3)]
    clock = FakeClock(1_700_000_000_000)
    writes = 0
    for _ in range(60):  # an hour, a tick a minute, every scheduler
        for scheduler in schedulers:
            before = queue.last_seq
            scheduler.tick(clock.now)
            writes += queue.last_seq - before
        clock.advance(MINUTE)
    keys = fired(queue)
    assert len(keys) == len(set(keys)) == writes == 12  # 12 in the hour; none from before the entry's first look
    assert all(int(key.rsplit(":", 1)[1]) % (5 * MINUTE) == 0 for key in keys)
    assert all(scheduler.fired == sorted(keys) for scheduler in schedulers)


def test_a_changed_entry_does_not_rewrite_a_firing_already_enqueued(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    Scheduler([Periodic("tick", {"v": 1}, every=1_000)], queue, units_per_second=1_000).tick(10_000)
    changed = Scheduler([Periodic("tick", {"v": 2}, every=1_000)], queue, units_per_second=1_000)
    changed.tick(10_500)
    task = queue.get("cron:tick:10000")
    assert task is not None and task.payload == {"v": 1}
    assert "the entry changed since it was put" in caplog.text and changed.fired == []


def test_firing_keys_name_the_entry_and_the_time() -> None:
    assert firing_key("nightly", 1_700_000_000_000) == "cron:nightly:1700000000000"


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"name": "x", "payload": {}}, "exactly one of"),
        ({"name": "x", "payload": {}, "every": 1, "cron": "* * * * *"}, "exactly one of"),
        ({"name": "x", "payload": {}, "every": 0}, "'every'"),
        ({"name": "x", "payload": {}, "every": 1, "missed": "all"}, "'missed'"),
        ({"name": "", "payload": {}, "every": 1}, "name"),
        ({"name": "x", "payload": {}, "cron": "61 * * * *"}, "minute"),
        ({"name": "x", "payload": {}, "cron": "* * 31 2 *"}, "never fires"),
        ({"name": "x", "payload": {}, "cron": "* * * *"}, "5 fields"),
    ],
)
def test_a_bad_entry_is_refused_naming_its_fault(arguments: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Periodic(**arguments)  # type: ignore[arg-type]


def test_a_schedule_file_in_toml_or_json_gives_entries_with_every_in_seconds(tmp_path: Path) -> None:
    toml = tmp_path / "schedule.toml"
    toml.write_text(
        '[[task]]\nname = "nightly"\ncron = "0 3 * * *"\npayload = {kind = "report"}\n\n'
        '[[task]]\nname = "tick"\nevery = 1.5\nmissed = "skip"\n'
    )
    nightly, tick = load_schedule(toml, 1_000)
    assert (nightly.name, nightly.cron, nightly.payload, nightly.missed) == (
        "nightly",
        "0 3 * * *",
        {"kind": "report"},
        "once",
    )
    assert (tick.every, tick.missed, tick.payload) == (1_500, "skip", {})
    as_json = tmp_path / "schedule.json"
    as_json.write_text(json.dumps([{"name": "tick", "every": 60}]))
    assert load_schedule(as_json, 1_000) == [Periodic("tick", {}, every=60_000)]
    as_json.write_text(json.dumps([{"name": "tick", "every": 60, "evry": 1}]))
    with pytest.raises(ValueError, match="unknown field"):
        load_schedule(as_json, 1_000)


# -- the cron parser ---------------------------------------------------------------------


def naive_fields(expression: str) -> tuple[set[int], ...]:
    """The values each field allows, read the slow, obvious way (for comparison with `Cron`)."""
    bounds = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
    fields = []
    for text, (low, high) in zip(expression.split(), bounds, strict=True):
        values: set[int] = set()
        for part in text.split(","):
            span, _, step = part.partition("/")
            first, last = (low, high) if span == "*" else (int(span.split("-")[0]), int(span.split("-")[-1]))
            if step and span != "*" and "-" not in span:
                last = high
            values.update(value for value in range(first, last + 1) if (value - first) % int(step or 1) == 0)
        fields.append(values)
    if 7 in fields[4]:
        fields[4].add(0)
    return tuple(fields)


def naive_matches(expression: str, seconds: int, fields: tuple[set[int], ...]) -> bool:
    """Whether the minute at `seconds` matches (day of month OR weekday when both are restricted)."""
    minutes, hours, days, months, weekdays = fields
    moment = time.gmtime(seconds)
    day_ok, weekday_ok = moment.tm_mday in days, (moment.tm_wday + 1) % 7 in weekdays
    _, _, day, _, weekday = expression.split()
    either = not (day.startswith("*") or weekday.startswith("*"))
    return (
        moment.tm_min in minutes
        and moment.tm_hour in hours
        and moment.tm_mon in months
        and ((day_ok or weekday_ok) if either else (day_ok and weekday_ok))
    )


EXPRESSIONS = [
    "* * * * *",
    "*/7 * * * *",
    "5 */3 * * *",
    "0 9-17 * * 1-5",
    "30 2 1,15 * *",
    "0 0 13 * 5",
    "15 4 * 2 0",
    "0 12 * * 7",
    "10-20/5 1 * * *",
]


@settings(max_examples=40, deadline=None)
@given(expression=st.sampled_from(EXPRESSIONS), start=st.integers(100_000_000, 2_000_000_000))
def test_next_after_and_latest_agree_with_a_minute_by_minute_search(expression: str, start: int) -> None:
    cron, fields = Cron(expression), naive_fields(expression)
    following = cron.next_after(start)
    assert following > start and following % 60 == 0 and naive_matches(expression, following, fields)
    minute = start - start % 60 + 60
    while minute < min(following, minute + 2 * 86_400):
        assert not naive_matches(expression, minute, fields)
        minute += 60
    latest = cron.latest_at_or_before(following)
    assert latest == following
    earlier = cron.latest_at_or_before(following - 1)
    assert earlier is not None and earlier < following and naive_matches(expression, earlier, fields)


def test_cron_reads_names_shorthands_and_treats_weekday_seven_as_sunday() -> None:
    sunday_noon = calendar.timegm((2024, 3, 3, 12, 0, 0))  # a Sunday
    assert Cron("0 12 * * sun").next_after(sunday_noon - 1) == sunday_noon
    assert Cron("0 12 * * 7").next_after(sunday_noon - 1) == sunday_noon
    assert Cron("0 12 * mar *").next_after(sunday_noon - 1) == sunday_noon
    assert Cron("@daily").next_after(sunday_noon) == calendar.timegm((2024, 3, 4, 0, 0, 0))
    leap = Cron("0 0 29 2 *").next_after(calendar.timegm((2025, 1, 1, 0, 0, 0)))
    assert leap == calendar.timegm((2028, 2, 29, 0, 0, 0))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[[task]]\nname = "x"\ncron = 5\n', "'cron' is a str"),
        ('[[task]]\nname = "x"\nevery = inf\n', "'every' is a number of seconds"),
        ('[[task]]\nname = "x"\nevery = nan\n', "'every' is a number of seconds"),
        ('[[task]]\nname = "x"\nevery = 1e300\n', "'every'"),
        ('[[task]]\nname = "x"\nevery = 1\n\n[[task]]\nname = "x"\nevery = 2\n', "names must be unique"),
        ('[[task]]\nname = "x"\nevery = 1\nmax_attempts = 0\n', "max_attempts"),
        ('[[task]]\nname = "x"\nevery = 1\nmax_attempts = true\n', "max_attempts"),
        ('[[task]]\nname = "x"\nevery = 1\npayload = {at = 1979-05-27T07:32:00Z}\n', "payload"),
        ('[[task]]\nname = "x"\nevery = 1\npayload = {n = nan}\n', "payload"),
        (f'[[task]]\nname = "{"n" * 1_020}"\nevery = 1\n', "name"),
        ("[[task]]\nname = 7\nevery = 1\n", "name"),
        ('[[task]]\nname = "x"\nevery = 1\nmissed = ["once"]\n', "'missed'"),
    ],
)
def test_a_bad_schedule_file_is_refused_whole_naming_its_fault(tmp_path: Path, text: str, words: str) -> None:
    """Every entry is checked when the file is read, so a bad one never reaches a running scheduler."""
    path = tmp_path / "schedule.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=words):
        load_schedule(path, 1_000)


def test_a_brand_new_entry_does_not_enqueue_a_firing_from_before_it_existed(queue: Queue) -> None:
    """A nightly job first started at 23:20 has missed nothing: it first fires at the next 03:00."""
    entry = Periodic("nightly", {}, cron="0 3 * * *")
    start = calendar.timegm((2026, 12, 5, 23, 20, 0)) * 1_000
    scheduler = Scheduler([entry], queue, units_per_second=1_000)
    next_due = scheduler.tick(start)
    assert fired(queue) == []
    assert next_due == calendar.timegm((2026, 12, 6, 3, 0, 0)) * 1_000
    scheduler.tick(next_due + 5_000)
    assert fired(queue) == [firing_key("nightly", next_due)]


def test_once_catches_up_on_a_start_when_the_store_knows_an_earlier_firing(queue: Queue) -> None:
    entry = Periodic("nightly", {}, cron="0 3 * * *")
    night = calendar.timegm((2026, 12, 1, 3, 0, 0)) * 1_000
    Scheduler([entry], queue, units_per_second=1_000).tick(night)
    # Down for four nights: one firing on the next start (the latest), found by paging the store.
    restart = calendar.timegm((2026, 12, 5, 23, 20, 0)) * 1_000
    Scheduler([entry], queue, units_per_second=1_000).tick(restart)
    latest = calendar.timegm((2026, 12, 5, 3, 0, 0)) * 1_000
    assert fired(queue) == [firing_key("nightly", night), firing_key("nightly", latest)]


def test_each_firing_is_logged_fired_once_by_the_scheduler_that_enqueued_it(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    entry = Periodic("report", {"kind": "report"}, every=MINUTE)
    schedulers = [Scheduler([entry], queue, units_per_second=1_000) for _ in range(4)]
    clock = FakeClock(1_700_000_000_000)
    with caplog.at_level(logging.INFO, logger="walqueue.worker"):
        for _ in range(5):
            for scheduler in schedulers:
                scheduler.tick(clock.now)
            clock.advance(MINUTE)
    lines = [record.getMessage() for record in caplog.records if ": fired " in record.getMessage()]
    assert sorted(lines) == sorted(f"periodic report: fired {key}" for key in fired(queue)) and len(lines) == 5


def test_with_processes_only_the_first_child_runs_the_schedule(tmp_path: Path) -> None:
    from walqueue.worker.cli import _parser
    from walqueue.worker.supervisor import _child_command

    (tmp_path / "s.toml").write_text('[[task]]\nname = "t"\nevery = 1\npayload = {}\n')
    arguments = _parser().parse_args(["q", "app:h", "--processes", "4", "--schedule", str(tmp_path / "s.toml")])
    first = _child_command("sock", "app:h", arguments)
    others = _child_command("sock", "app:h", arguments, schedule=False)
    assert "--schedule" in first and "--schedule" not in others
    assert [part for part in first if part not in others] == ["--schedule", str(tmp_path / "s.toml")]
