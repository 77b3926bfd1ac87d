"""Special files and symlinks at every name a store has: opening and walqueue-fsck give one verdict, and never hang.

For each file of a real store (CURRENT, the snapshot, every segment, LOCK,
and the transient and unpublished names), the entry is replaced by a FIFO,
a directory, a symlink to /dev/zero, /dev/null or a file outside the
store, or a dangling symlink. Opening must then either succeed (the name is
one that opening never reads) or raise `CorruptStore` naming the file, and
`walqueue-fsck --replay` must say exactly that: healthy or torn when opening
succeeds, corrupt when it raises. Nothing may block (a FIFO is never
opened for reading) and nothing outside the store may change.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from model import SPECIAL_KINDS, directory_digest, place_special
from walqueue import CorruptStore, Queue
from walqueue.format.fsck import EXIT_CORRUPT, check
from walqueue.format.names import CURRENT_TMP_NAME, LOCK_NAME

pytestmark = pytest.mark.timeout(120)

KINDS = SPECIAL_KINDS


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with a snapshot, a leftover-free live WAL of two segments, and LOCK."""
    directory = tmp_path_factory.mktemp("pristine") / "q"
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        for n in range(3):
            queue.put(f"a{n}", {"n": n})
        queue.compact()
        [lease] = queue.reserve("w", now=1, lease_seconds=10)
        queue.ack(lease, now=2)
        queue._wal.rotate()  # noqa: SLF001 - a second live segment, as an interrupted compaction leaves
        queue.put("b", {})
    return directory


def _names(pristine: Path) -> list[str]:
    snapshot = next(p.name for p in pristine.glob("snapshot-*.snap"))
    segments = sorted(p.name for p in pristine.glob("wal-*.log"))
    orphan = snapshot.replace("snapshot-0", "snapshot-9")
    return ["CURRENT", snapshot, *segments, LOCK_NAME, CURRENT_TMP_NAME, orphan]


def test_every_name_and_every_kind_of_special_file(pristine: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "precious"
    precious.write_bytes(b"never touched")
    checked = 0
    for name in _names(pristine):
        for kind in KINDS:
            directory = tmp_path / f"{checked}"
            shutil.copytree(pristine, directory, symlinks=True)
            place_special(directory / name, kind, precious)
            where = f"{name} as {kind}"
            report = check(directory, replay=True)
            try:
                with Queue(directory, sync=False, compact_bytes=None) as queue:
                    queue.put("new", {})
                    queue.compact()
            except CorruptStore as exc:
                assert exc.path is not None and os.path.basename(exc.path) == name, (where, exc)
                assert report.exit_code == EXIT_CORRUPT, (where, report.findings)
            except FileExistsError as exc:
                # A directory or special file in the way of a file compaction writes: reported, nothing lost.
                assert name in (CURRENT_TMP_NAME,) or name.startswith("snapshot-"), (where, exc)
                assert report.exit_code != EXIT_CORRUPT, (where, report.findings)
            else:
                assert report.exit_code != EXIT_CORRUPT, (where, report.findings)
            assert precious.read_bytes() == b"never touched", where
            assert sorted(p.name for p in outside.iterdir()) == ["precious"], where
            checked += 1
            shutil.rmtree(directory)
    assert checked == len(_names(pristine)) * len(KINDS)


def test_fsck_changes_nothing_and_agrees_when_current_is_a_fifo(pristine: Path, tmp_path: Path) -> None:
    directory = tmp_path / "q"
    shutil.copytree(pristine, directory, symlinks=True)
    place_special(directory / "CURRENT", "fifo")
    before = directory_digest(directory)
    assert check(directory).exit_code == EXIT_CORRUPT
    assert directory_digest(directory) == before
