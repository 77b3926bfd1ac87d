"""Salvage over a sweep of damaged copies of a real store.

For every variant (bit flips at a stride through every file, each file
deleted, each file cut in half) of the store that tests/crash/
test_fsck_agreement.py builds (leftover segment, orphan snapshots,
CURRENT.tmp, two live segments), salvage must:

- never change a byte of the damaged directory;
- either refuse (`SalvageError`: nothing valid) or write a store that
  checks healthy, opens, and holds exactly the history its plan names;
- keep at least what opening keeps: whenever the damaged copy itself opens,
  the salvaged store opens to the very same tasks and last sequence.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_fsck_agreement import _build_store

from walqueue import CorruptStore, Queue
from walqueue.format.fsck import EXIT_HEALTHY, check
from walqueue.format.fsck.salvage import SalvageError, salvage

Files = dict[str, bytes]
STRIDE = 29  # bytes between two flipped bits of one file


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return _build_store(tmp_path_factory.mktemp("salvage-sweep") / "store")


def variants(files: Files) -> Iterator[tuple[str, Files]]:
    for name, data in files.items():
        if name == "LOCK":
            continue
        for offset in range(0, len(data), STRIDE):
            flipped = bytearray(data)
            flipped[offset] ^= 1 << (offset % 8)
            yield f"{name} byte {offset}", {**files, name: bytes(flipped)}
        yield f"{name} deleted", {k: v for k, v in files.items() if k != name}
        yield f"{name} halved", {**files, name: data[: len(data) // 2]}


def write(directory: Path, files: Files) -> None:
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)


def read(directory: Path) -> Files:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def state(directory: Path) -> tuple[int, list[dict[str, object]]]:
    with Queue(directory, sync=False, compact_bytes=None) as q:
        return q.last_seq, [task.to_dict() for task in q.tasks()]


def test_salvage_of_the_intact_store_keeps_everything(store: Files, tmp_path: Path) -> None:
    write(tmp_path / "q", store)
    result = salvage(tmp_path / "q", tmp_path / "out")
    assert result.plan.dropped_transactions == 0 and result.check_status == "healthy"
    assert state(tmp_path / "out") == state(tmp_path / "q")


def test_salvage_over_a_sweep_of_damaged_copies(store: Files, tmp_path: Path) -> None:
    checked = refused = 0
    for index, (label, files) in enumerate(variants(store)):
        damaged, out = tmp_path / f"v{index}", tmp_path / f"v{index}.out"
        write(damaged, files)
        try:
            result = salvage(damaged, out)
        except SalvageError:
            refused += 1
            assert read(damaged) == files, label
            continue
        assert read(damaged) == files, label  # salvage never touches the damaged store
        assert result.check_status == "healthy", label
        assert check(out, replay=True).exit_code == EXIT_HEALTHY, label
        salvaged = state(out)
        assert salvaged[0] == result.plan.last_seq, label
        copy = tmp_path / f"v{index}.open"
        shutil.copytree(damaged, copy)
        try:
            opened = state(copy)
        except CorruptStore:
            pass
        else:
            assert salvaged == opened, label
        checked += 1
        shutil.rmtree(copy)
        shutil.rmtree(out)
        shutil.rmtree(damaged)
    assert checked > 100 and refused >= 0
