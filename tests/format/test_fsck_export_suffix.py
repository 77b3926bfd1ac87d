"""After one flipped byte in the published snapshot, the intact later transactions can be got back by hand.

Opening keeps refusing (no fallback to another snapshot, no fresh start),
and a salvage has nothing to keep: the compaction deleted the segments the
snapshot replaced. `walqueue-fsck --export-suffix OUT DIR` writes the
intact transactions a salvage drops as JSON lines, exactly as the log holds
them; docs/REPAIR.md's script turns their puts into `walqueue` requests,
which recreate the tasks in a new queue.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_fsck import unchanged

from walqueue import CorruptStore, Queue
from walqueue.format import snapshot_name
from walqueue.format.fsck import EXIT_CORRUPT, EXIT_HEALTHY, check, main
from walqueue.format.fsck.salvage import SalvageError, export_suffix, salvage

if TYPE_CHECKING:
    from conftest import RunPython

REPO_ROOT = Path(__file__).resolve().parents[2]


def store_with_damaged_snapshot(directory: Path) -> Path:
    """10 puts, a compaction (snapshot at seq 10), 100 later transactions; then one flipped byte in the snapshot.

    The later transactions: 97 puts, a reserve of two snapshot tasks, an ack
    of one of them, and a cancel of one of the later tasks.
    """
    with Queue(directory, sync=False, compact_bytes=None) as q:
        for i in range(10):
            q.put(f"early{i}", {"i": i})
        q.compact()
        for i in range(97):
            q.put(f"late{i}", {"i": i}, key=f"k{i}")
        leases = q.reserve("w", now=5, lease_seconds=30, limit=2)
        assert [lease.task_id for lease in leases] == ["early0", "early1"]
        q.ack(leases[0], now=6)
        q.cancel("late5")
        assert q.last_seq == 110
    snapshot = directory / snapshot_name(10)
    data = bytearray(snapshot.read_bytes())
    data[len(data) // 2] ^= 0x04
    snapshot.write_bytes(bytes(data))
    return directory


def test_opening_refuses_and_salvage_points_to_the_export(tmp_path: Path) -> None:
    store = store_with_damaged_snapshot(tmp_path / "q")
    with pytest.raises(CorruptStore):
        Queue(store, create=False)
    report = check(store)
    assert report.exit_code == EXIT_CORRUPT and report.survey is not None and report.survey.plan is not None
    plan = report.survey.plan
    assert (plan.base, plan.last_seq, plan.intact_dropped) == (None, 0, [[11, 110]])
    with pytest.raises(SalvageError, match="--export-suffix"):
        salvage(store, tmp_path / "salvaged")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main([str(store)]) == EXIT_CORRUPT
    assert "keeps nothing: export the intact transactions after the gap with --export-suffix OUT" in text.getvalue()


def test_the_export_holds_every_intact_later_transaction_as_the_log_holds_it(tmp_path: Path) -> None:
    store = store_with_damaged_snapshot(tmp_path / "q")
    out = tmp_path / "suffix.jsonl"
    with unchanged(store):
        result = export_suffix(store, out)
    assert (result.exported, result.transactions) == ([[11, 110]], 100)
    lines = out.read_bytes().splitlines()
    transactions = [json.loads(line) for line in lines]
    assert [t["seq"] for t in transactions] == list(range(11, 111))
    assert all(set(t) == {"ops", "seq"} for t in transactions)
    assert transactions[0]["ops"] == [
        {"op": "put", "task": "late0", "payload": {"i": 0}, "key": "k0", "available_at": 0, "max_attempts": 3}
    ]
    with pytest.raises(SalvageError, match="exists"):
        export_suffix(store, out)


def test_a_healthy_store_has_nothing_to_export(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        q.put("a", {})
    with pytest.raises(SalvageError, match="nothing to export"):
        export_suffix(tmp_path / "q", tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def _repair_script() -> str:
    text = (REPO_ROOT / "docs" / "REPAIR.md").read_text()
    match = re.search(r"```python\n(\s*# replay_suffix\.py.*?)```", text, re.S)
    assert match is not None, "docs/REPAIR.md lost its replay_suffix.py script"
    lines = match.group(1).splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines) + "\n"


@pytest.mark.timeout(120)
def test_the_documented_procedure_puts_the_tasks_back(tmp_path: Path, run_python: RunPython) -> None:
    store = store_with_damaged_snapshot(tmp_path / "q")
    out = tmp_path / "suffix.jsonl"
    exported = run_python(["-m", "walqueue.format.fsck", "--export-suffix", str(out), str(store)])
    assert exported.returncode == EXIT_HEALTHY, exported.stderr
    assert "seq 11..110" in exported.stdout
    again = run_python(["-m", "walqueue.format.fsck", "--export-suffix", str(out), str(store)])
    assert again.returncode == EXIT_CORRUPT and "exists" in again.stderr
    script = tmp_path / "replay_suffix.py"
    script.write_text(_repair_script())
    requests = subprocess.run(
        [sys.executable, str(script)], stdin=out.open(), capture_output=True, text=True, timeout=60, check=True
    ).stdout
    fresh = tmp_path / "new"
    answers = run_python(["-m", "walqueue.cli", str(fresh)], input=requests, env={**os.environ})
    assert answers.returncode == 0, answers.stderr
    assert all(json.loads(line)["ok"] for line in answers.stdout.splitlines())
    with Queue(fresh, create=False) as q:
        ids = sorted(task.task_id for task in q.tasks())
    # Every later put except the cancelled one; the lease and ack of snapshot tasks name nothing to put.
    assert ids == sorted(f"late{i}" for i in range(97) if i != 5)
