"""Salvage: the longest valid history of a damaged store, planned and written as a NEW store.

`walqueue.format.survey` reads what survives; this module decides what a
repair can keep and writes it, reading the damaged directory only (it
never writes, creates, truncates or locks anything in it):

- `survey(directory)`: the survey plus its `SalvagePlan`. The longest valid
  history starts from a base, an empty state (sequence 0) or a snapshot
  that verifies, and continues with the transactions that follow it
  without a gap. Of all bases, the one reaching the highest sequence wins
  (ties: the snapshot CURRENT names, then the newer snapshot). When a state
  machine is registered (`walqueue.format.replay`: the engine registers
  its own), it replays the plan as well and the history stops before the
  first invalid transaction, so that the salvaged store opens.
- `salvage(directory, out)` writes that history to the new directory `out`
  (which must not exist or be empty, and may not lie inside `directory`):
  the base snapshot rewritten record for record, one WAL segment holding the
  kept frames byte for byte, and CURRENT, all fsynced; then it checks `out`
  as `walqueue-fsck` would. It reports exactly what it dropped, and refuses
  while any file could not be read: what an unreadable file holds is
  unknown, so a salvage could not say what it drops.
- `export_suffix(directory, out)` writes the intact transactions the plan
  drops (those after a gap, e.g. after a damaged snapshot) as JSON lines,
  for an operator to replay by hand (docs/REPAIR.md).

Command line: ``walqueue-fsck --salvage OUT DIRECTORY`` and
``walqueue-fsck --export-suffix OUT DIRECTORY`` (docs/REPAIR.md says when).

Example::

    result = salvage("/var/lib/app/queue", "/var/lib/app/queue.salvaged")
    print(result.plan.last_seq, result.plan.dropped_transactions)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Unpack

from walqueue.format.canonical import canonical_json
from walqueue.format.current import Current, publish_current, write_current_tmp
from walqueue.format.errors import CorruptStore, WalQueueError
from walqueue.format.frame import DIGEST_BYTES, LENGTH_BYTES
from walqueue.format.fsck.check import check
from walqueue.format.fsutil import fsync_directory, write_all
from walqueue.format.jsonfields import FieldsJson, fields_json
from walqueue.format.names import snapshot_name, wal_name
from walqueue.format.salvage_plan import SurveyOptions, survey
from walqueue.format.snapshot import write_snapshot
from walqueue.format.survey import (
    Damage,
    Run,
    SalvagePlan,
    SegmentSurvey,
    SnapshotSurvey,
    Survey,
    SurveySource,
    seq_ranges,
)
from walqueue.format.transaction import transaction_seq

__all__ = [
    "Damage",
    "ExportResult",
    "Run",
    "SalvageError",
    "SalvagePlan",
    "SalvageResult",
    "SegmentSurvey",
    "SnapshotSurvey",
    "Survey",
    "export_suffix",
    "salvage",
    "seq_ranges",
    "survey",
]


class SalvageError(WalQueueError):
    """Salvage could not write a store: `out` is not usable, a file is unreadable, or nothing valid survives."""


# -- writing the new store --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SalvageResult:
    """What `salvage` wrote to `out`, from which survey, and how `out` checks afterwards."""

    directory: str
    out: str
    survey: Survey
    plan: SalvagePlan
    files: list[str]
    check_status: str

    @property
    def succeeded(self) -> bool:
        """True when `out` checks healthy (the `--salvage` exit status 0)."""
        return self.check_status == "healthy"

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object (the `--salvage --json` report)."""
        return {**fields_json(self, omit=("check_status",)), "check": self.check_status}


def _prepare_out(directory: str, out: str) -> None:
    real_dir = os.path.realpath(directory)
    real_out = os.path.realpath(out)
    if real_out == real_dir or real_out.startswith(real_dir.rstrip(os.sep) + os.sep):
        raise SalvageError(f"{out} is {directory} or inside it: salvage never writes into the damaged store")
    if os.path.lexists(out):
        if not os.path.isdir(out) or os.path.islink(out):
            raise SalvageError(f"{out} exists and is not a directory")
        if os.listdir(out):
            raise SalvageError(f"{out} is not empty: salvage writes a new store only")
    else:
        os.makedirs(out)
        parent = os.path.dirname(os.path.abspath(out))
        fsync_directory(parent)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _surveyed(directory: str | os.PathLike[str], options: SurveyOptions) -> tuple[str, Survey, SalvagePlan]:
    """The survey of `directory` and its plan, for a command that writes what it found."""
    source_dir = os.fspath(directory)
    if not os.path.isdir(source_dir):
        raise SalvageError(f"{source_dir} is not a directory")
    found = survey(source_dir, **options)
    assert found.plan is not None
    return source_dir, found, found.plan


def _refuse_unreadable(source_dir: str, plan: SalvagePlan) -> None:
    """Refuse to write anything while a file is unreadable: what it holds could be neither kept nor counted."""
    if plan.unreadable:
        raise SalvageError(
            f"cannot read {', '.join(plan.unreadable)} in {source_dir}: what it holds is unknown, so a salvage "
            "could drop transactions without counting them; fix the permissions (or the disk) and run it again"
        )


def _refuse_unsalvageable(source_dir: str, plan: SalvagePlan) -> None:
    """Refuse a salvage that could not say what it drops, or that would keep nothing."""
    _refuse_unreadable(source_dir, plan)
    if plan.base is None and plan.last_seq == 0:
        suffix = ""
        if plan.intact_dropped:
            suffix = (
                f"; the intact transactions after the gap can be exported as JSON lines with "
                f"`walqueue-fsck --export-suffix OUT {source_dir}`"
            )
        raise SalvageError(
            f"nothing to salvage in {source_dir}: no snapshot verifies and no intact transaction 1 "
            f"(an empty queue needs no salvage){suffix}"
        )


def salvage(
    directory: str | os.PathLike[str], out: str | os.PathLike[str], **options: Unpack[SurveyOptions]
) -> SalvageResult:
    """Write the longest valid history of `directory` as a new store at `out`; never touch `directory`.

    `options` (`engine`, `progress`) are `survey`'s, for the survey it starts with.

    `out` must not exist or be an empty directory outside `directory`. The
    new store holds the plan's base snapshot (if any) under its own name,
    ``wal-00000000000000000001.log`` with the kept transactions' frames, and
    CURRENT pointing at both; every file and the directory are fsynced.
    Raises `SalvageError` (an unusable `out`, an unreadable file, or no
    history at all) or `OSError`; `CorruptStore` if a kept frame changed
    since the survey.
    """
    source_dir, found, plan = _surveyed(directory, options)
    out_dir = os.fspath(out)
    _refuse_unsalvageable(source_dir, plan)
    _prepare_out(source_dir, out_dir)
    files = _write_history(SurveySource(source_dir), found, plan, out_dir)
    fsync_directory(out_dir)
    verdict = check(out_dir, replay=plan.engine_checked)
    return SalvageResult(source_dir, out_dir, found, plan, files, verdict.status)


def _write_history(source: SurveySource, found: Survey, plan: SalvagePlan, out_dir: str) -> list[str]:
    """The base snapshot, one segment of the kept frames and CURRENT, each fsynced; the names written."""
    files: list[str] = []
    info = None
    if plan.base is not None:
        name = snapshot_name(plan.base_seq)
        with source.snapshot(plan.base) as reader:
            info = write_snapshot(
                os.path.join(out_dir, name),
                reader.seq,
                reader.count,
                (canonical_json(r) for r in reader.records()),
                clock=reader.clock,
                queues=reader.queues,
            )
        _fsync_file(os.path.join(out_dir, name))
        files.append(name)
    segment = wal_name(1)
    fd = os.open(os.path.join(out_dir, segment), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for seq in range(plan.base_seq + 1, plan.last_seq + 1):
            write_all(fd, _frame_bytes(source, found, seq))
        os.fsync(fd)
    finally:
        os.close(fd)
    files.append(segment)
    if info is not None:
        write_current_tmp(out_dir, Current(snapshot_name(plan.base_seq), plan.base_seq, info.size, info.sha256, 1))
        publish_current(out_dir)
        files.append("CURRENT")
    return files


def _frame_bytes(source: SurveySource, found: Survey, seq: int) -> bytes:
    """The frame holding `seq`, read and verified again (it may have changed since the survey)."""
    file, offset, size = found.frames[seq]
    data, value = source.read_frame(file, offset, size)
    if transaction_seq(value, file, offset) != seq:
        raise CorruptStore(source.path(file), offset, f"frame no longer holds sequence {seq}")
    return data


# -- exporting the intact suffix --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExportResult(FieldsJson):
    """What `export_suffix` wrote: the intact transactions a salvage drops, as JSON lines."""

    directory: str
    out: str
    plan: SalvagePlan
    exported: list[list[int]]
    transactions: int

    @property
    def succeeded(self) -> bool:
        """Always true: an export that could not be written raised instead."""
        return True


def export_suffix(
    directory: str | os.PathLike[str], out: str | os.PathLike[str], **options: Unpack[SurveyOptions]
) -> ExportResult:
    """Write every intact transaction that a salvage of `directory` drops to the new file `out`, one per line.

    `options` (`engine`, `progress`) are `survey`'s, for the survey it starts with.

    These are the transactions after a gap (a damaged snapshot, a lost or
    damaged segment): intact, but with nothing to apply them to. Each line
    is one transaction exactly as the log holds it, ``{"ops":[...],"seq":N}``
    in canonical JSON, in sequence order; docs/REPAIR.md shows how to replay
    its puts by hand. `out` must not exist; it is fsynced. Never touches
    `directory`. Raises `SalvageError` when a file is unreadable or nothing
    intact is dropped.
    """
    source_dir, found, plan = _surveyed(directory, options)
    out_path = os.fspath(out)
    _refuse_unreadable(source_dir, plan)
    seqs = [seq for first, last in plan.intact_dropped for seq in range(first, last + 1)]
    if not seqs:
        raise SalvageError(f"nothing to export from {source_dir}: a salvage drops no intact transaction")
    source = SurveySource(source_dir)
    try:
        fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise SalvageError(f"{out_path} exists: the export writes a new file only") from None
    try:
        for seq in seqs:
            write_all(fd, _frame_bytes(source, found, seq)[LENGTH_BYTES:-DIGEST_BYTES] + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(os.path.dirname(os.path.abspath(out_path)))
    return ExportResult(source_dir, out_path, plan, plan.intact_dropped, len(seqs))
