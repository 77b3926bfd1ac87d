"""An opening error points the way: the right file, `walqueue-fsck DIR`, and a repair guide an install carries.

- A deleted CURRENT in a compacted store is named as CURRENT (opening used to
  say "WAL segment is missing", naming a segment the compaction deleted on
  purpose), by opening and by fsck alike.
- Every `CorruptStore` from opening says to run `walqueue-fsck DIR` and how
  to print the repair procedure.
- `walqueue-fsck --help-repair` prints the guide shipped inside the format
  package (docs/ is not in the wheels), which is docs/REPAIR.md exactly.
- The CLI consumer logs the torn tail it cuts on stderr, as the server does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_fsck import tx, write_segment

import walqueue.format.fsck
from walqueue import CorruptStore, Queue
from walqueue.format import wal_name
from walqueue.format.fsck import EXIT_CORRUPT, check, repair_guide

if TYPE_CHECKING:
    from conftest import RunPython

REPO_ROOT = Path(__file__).resolve().parents[2]


def compacted_store(directory: Path) -> Path:
    with Queue(directory, sync=False, compact_bytes=None) as q:
        for i in range(5):
            q.put(f"a{i}", {"i": i})
        q.compact()
        q.put("late", {})
    return directory


def test_opening_a_compacted_store_without_current_names_current(tmp_path: Path) -> None:
    store = compacted_store(tmp_path / "q")
    (store / "CURRENT").unlink()
    with pytest.raises(CorruptStore) as raised:
        Queue(store, create=False)
    assert raised.value.path == str(store / "CURRENT")
    assert "CURRENT is missing" in str(raised.value) and "WAL segment is missing" not in str(raised.value)
    report = check(store)
    assert report.exit_code == EXIT_CORRUPT
    assert [(f.kind, f.file) for f in report.findings if f.severity == "corrupt"] == [("current-missing", "CURRENT")]
    assert [c.kind for c in report.causes] == ["current-missing"]


def test_a_lost_first_segment_without_snapshots_is_still_a_missing_segment(tmp_path: Path) -> None:
    write_segment(tmp_path, 2, tx(1))
    with pytest.raises(CorruptStore, match="WAL segment is missing") as raised:
        Queue(tmp_path, create=False)
    assert raised.value.path == str(tmp_path / wal_name(1))


@pytest.mark.parametrize("damage", ["current-deleted", "bit-flip"])
def test_every_opening_error_says_to_run_fsck_and_where_the_repair_guide_is(tmp_path: Path, damage: str) -> None:
    store = compacted_store(tmp_path / "my queue")
    if damage == "current-deleted":
        (store / "CURRENT").unlink()
    else:
        segment = store / wal_name(2)
        data = bytearray(segment.read_bytes())
        data[10] ^= 0x01
        segment.write_bytes(bytes(data))
    with pytest.raises(CorruptStore) as raised:
        Queue(store, create=False)
    message = str(raised.value)
    assert f"walqueue-fsck '{store}'" in message
    assert "walqueue-fsck --help-repair" in message and "docs/REPAIR.md" in message


def test_the_shipped_repair_guide_is_docs_repair_md() -> None:
    shipped = Path(walqueue.format.fsck.__file__).parent / "REPAIR.md"
    assert shipped.read_text() == (REPO_ROOT / "docs" / "REPAIR.md").read_text(), (
        "copy docs/REPAIR.md to packages/walqueue-format/src/walqueue/format/fsck/REPAIR.md"
    )
    assert repair_guide() == shipped.read_text()


def test_help_repair_prints_the_guide_without_a_directory(run_python: RunPython) -> None:
    result = run_python(["-m", "walqueue.format.fsck", "--help-repair"])
    assert result.returncode == 0, result.stderr
    assert result.stdout == (REPO_ROOT / "docs" / "REPAIR.md").read_text()
    helped = run_python(["-m", "walqueue.format.fsck", "--help"])
    assert "--help-repair" in helped.stdout


@pytest.mark.timeout(60)
def test_the_cli_consumer_logs_the_torn_tail_it_cuts(tmp_path: Path, src_pythonpath: str) -> None:
    write_segment(tmp_path, 1, tx(1), tx(2)[:-5])
    env = {**os.environ, "PYTHONPATH": src_pythonpath}
    result = subprocess.run(
        [sys.executable, "-m", "walqueue.cli", str(tmp_path)],
        input="", capture_output=True, text=True, env=env, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "truncating a torn tail" in result.stderr and wal_name(1) in result.stderr
    assert "WARNING" in result.stderr
