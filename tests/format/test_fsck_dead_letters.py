"""`walqueue-fsck --replay` says why the dead letters died: grouped by last error type, bounded.

After its counts, the replay report lists the dead letters by the type of
their last error (the largest group first, with its count and the message
of its first dead letter by task id), at most `DEAD_LETTER_GROUPS` groups
and then how many more; the same in `--json` under ``replay.dead_letters``.
The stores here are written by a real `Queue` (a failed task, a task
released with an error on its last attempt, a cancel without a reason), so
the grouping is what the engine's replay of the log finds.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue import Lease, Queue
from walqueue.format.fsck import check, main
from walqueue.format.fsck.render import EXAMPLE_CHARS, render_text
from walqueue.format.fsck.report import DEAD_LETTER_GROUPS, DeadLetterGroup, group_dead_letters


def run_fsck(directory: Path, *args: str) -> tuple[int, str]:
    """fsck's command line, in-process: its exit status and its stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main([str(directory), "--replay", *args])
    return status, out.getvalue()


def leased(q: Queue, task_id: str, *, max_attempts: int = 3, now: int = 0) -> Lease:
    q.put(task_id, {"n": task_id}, max_attempts=max_attempts)
    [lease] = q.reserve("w", now=now, lease_seconds=100)
    assert lease.task_id == task_id
    return lease


def failing_store(directory: Path) -> None:
    """Two tasks failed permanently (KeyError), one released with an error on its last attempt, one cancelled."""
    with Queue(directory, sync=False) as q:
        q.fail(leased(q, "a-fail"), now=1, error={"type": "KeyError", "message": "no handler for 'resize'"})
        q.fail(leased(q, "b-fail"), now=2, error={"type": "KeyError", "message": "no handler for 'crop'"})
        q.release(leased(q, "c-last", max_attempts=1), now=3, error={"type": "TimeoutError", "message": "smtp"})
        q.put("d-cancelled", {})
        q.cancel("d-cancelled")
        q.put("e-ready", {})


def test_replay_lists_the_dead_letters_by_last_error_type_after_the_counts(tmp_path: Path) -> None:
    failing_store(tmp_path)
    status, out = run_fsck(tmp_path)
    assert status == 0, out
    lines = out.splitlines()
    counts = lines.index("  counts    ready 1, leased 0, completed 0, dead 4")
    assert lines[counts + 1 : counts + 4] == [
        "  dead      2 KeyError, e.g. \"no handler for 'resize'\"",  # the first by task id
        '  dead      1 TimeoutError, e.g. "smtp"',
        "  dead      1 without a recorded error",
    ]
    assert lines[counts + 4] == "result: healthy (exit 0)"


def test_the_json_report_carries_the_same_groups_with_whole_messages(tmp_path: Path) -> None:
    failing_store(tmp_path)
    status, out = run_fsck(tmp_path, "--json")
    assert status == 0
    dead = json.loads(out)["replay"]["dead_letters"]
    assert dead == {
        "groups": [
            {"type": "KeyError", "count": 2, "example": "no handler for 'resize'", "traceback": None},
            {"type": "TimeoutError", "count": 1, "example": "smtp", "traceback": None},
            {"type": None, "count": 1, "example": None, "traceback": None},
        ],
        "more_groups": 0,
        "more_tasks": 0,
    }


def test_a_released_task_shows_its_error_once_it_dies_and_an_expiry_counts_as_lease_expired(tmp_path: Path) -> None:
    with Queue(tmp_path, sync=False) as q:
        q.release(leased(q, "r", max_attempts=2), now=5, error={"type": "ValueError", "message": "bad input"})
        [lease] = q.reserve("w", now=10, lease_seconds=100)
        q.release(lease, now=11)  # the last attempt, without an error: the first one's stays
        q.put("x", {}, max_attempts=1)
        q.reserve("w9", now=20, lease_seconds=5)
        q.reserve("w", now=30, lease_seconds=5)  # reaps x: dead, LeaseExpired
    _, out = run_fsck(tmp_path)
    assert '  dead      1 ValueError, e.g. "bad input"' in out
    expired = "worker w9 did not ack, release or extend lease 1 by its deadline 25"
    assert f'  dead      1 LeaseExpired, e.g. "{expired}"' in out


def test_no_dead_letters_no_lines_and_an_empty_grouping(tmp_path: Path) -> None:
    with Queue(tmp_path, sync=False) as q:
        q.put("t", {})
    status, out = run_fsck(tmp_path)
    assert status == 0 and "  dead " not in out
    _, as_json = run_fsck(tmp_path, "--json")
    assert json.loads(as_json)["replay"]["dead_letters"] == {"groups": [], "more_groups": 0, "more_tasks": 0}


def test_without_replay_there_is_no_grouping(tmp_path: Path) -> None:
    failing_store(tmp_path)
    report = check(tmp_path)
    assert report.replay is None and "  dead " not in render_text(report)


def test_at_most_ten_groups_are_shown_and_the_rest_are_counted(tmp_path: Path) -> None:
    with Queue(tmp_path, sync=False) as q:
        for n in range(DEAD_LETTER_GROUPS + 3):  # 13 types; type E00 has 3 tasks, the others 1 or 2
            for copy in range(3 if n == 0 else 1 + n % 2):
                q.fail(leased(q, f"t{n:02d}.{copy}"), now=1, error={"type": f"E{n:02d}", "message": f"m{n}"})
    _, out = run_fsck(tmp_path)
    dead = [line for line in out.splitlines() if line.startswith("  dead ")]
    assert len(dead) == DEAD_LETTER_GROUPS + 1
    assert dead[0] == '  dead      3 E00, e.g. "m0"'
    assert dead[1:6] == [f'  dead      2 E{n:02d}, e.g. "m{n}"' for n in (1, 3, 5, 7, 9)]
    # 6 groups of 2 (E01..E11 odd) and 6 of 1 (E02..E12 even): the last three of one are past the bound
    assert dead[-1] == "  dead      and 3 more error types (3 dead letters)"
    _, as_json = run_fsck(tmp_path, "--json")
    grouping = json.loads(as_json)["replay"]["dead_letters"]
    assert len(grouping["groups"]) == DEAD_LETTER_GROUPS
    assert (grouping["more_groups"], grouping["more_tasks"]) == (3, 3)


def test_an_example_is_one_short_ascii_line_whatever_the_message_holds(tmp_path: Path) -> None:
    message = "first line\nsecond \x1b[31m red é " + "x" * 3000
    with Queue(tmp_path, sync=False) as q:
        q.fail(leased(q, "t"), now=1, error={"type": "Bad\ttype é", "message": message})
    _, out = run_fsck(tmp_path)
    [line] = [line for line in out.splitlines() if line.startswith("  dead ")]
    assert line.isascii() and line.isprintable()
    assert line.startswith('  dead      1 Bad\\ttype \\u00e9, e.g. "first line\\nsecond \\u001b[31m red \\u00e9 xxx')
    assert line.endswith('x..."') and len(line) < EXAMPLE_CHARS + 80
    _, as_json = run_fsck(tmp_path, "--json")
    [group] = json.loads(as_json)["replay"]["dead_letters"]["groups"]
    assert group["example"].startswith(message[:2000]) and group["example"].endswith(" bytes]")  # cut by the engine


def test_a_damaged_log_groups_the_dead_letters_of_the_state_before_the_damage(tmp_path: Path) -> None:
    failing_store(tmp_path)
    [segment] = tmp_path.glob("wal-*.log")
    data = bytearray(segment.read_bytes())
    data[-40] ^= 0x01  # the last frame (the put of e-ready) no longer verifies
    segment.write_bytes(bytes(data))
    report = check(tmp_path, replay=True)
    assert report.replay is not None and not report.replay.complete
    assert report.replay.dead_letters is not None
    assert [g.count for g in report.replay.dead_letters.groups] == [2, 1, 1]


errors = st.one_of(st.none(), st.tuples(st.sampled_from(["A", "B", "C", "D", "LeaseExpired"]), st.text(max_size=5)))


@settings(max_examples=200, deadline=None)
@given(dead=st.lists(errors, max_size=40), limit=st.integers(1, 6))
def test_grouping_counts_every_dead_letter_once_largest_first_within_the_bound(
    dead: list[tuple[str, str] | None], limit: int
) -> None:
    grouping = group_dead_letters(dead, limit)
    groups = list(grouping.groups)
    assert len(groups) <= limit
    assert sum(g.count for g in groups) + grouping.more_tasks == len(dead)
    kinds = {None if e is None else e[0] for e in dead}
    assert len(groups) + grouping.more_groups == len(kinds)
    assert [g.count for g in groups] == sorted((g.count for g in groups), reverse=True)
    if grouping.more_groups:
        assert min(g.count for g in groups) >= grouping.more_tasks / grouping.more_groups
    for group in groups:
        first = next(e for e in dead if (None if e is None else e[0]) == group.type)
        assert group == DeadLetterGroup(group.type, _count(dead, group.type), None if first is None else first[1])


def _count(dead: list[Any], kind: str | None) -> int:
    return sum(1 for e in dead if (None if e is None else e[0]) == kind)
