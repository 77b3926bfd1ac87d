"""File names in a WALQueue directory, formatted and parsed strictly.

A name that merely looks like a segment (`wal-1.log`, `wal-0000…0001.log.bak`,
non-ASCII digits) is not one: strict parsing keeps stray files from ever
being read as part of the log.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from walqueue.format.directory import StoreDirectory, as_store_directory

__all__ = [
    "CURRENT_NAME",
    "CURRENT_TMP_NAME",
    "LOCK_NAME",
    "NUMBER_DIGITS",
    "TMP_SUFFIX",
    "DirectoryListing",
    "list_directory",
    "parse_snapshot_name",
    "parse_wal_name",
    "snapshot_name",
    "wal_name",
]

NUMBER_DIGITS = 20
MAX_NUMBER = 10**NUMBER_DIGITS - 1
CURRENT_NAME = "CURRENT"
TMP_SUFFIX = ".tmp"
CURRENT_TMP_NAME = CURRENT_NAME + TMP_SUFFIX
LOCK_NAME = "LOCK"

_WAL_RE = re.compile(r"wal-([0-9]{20})\.log")
_SNAPSHOT_RE = re.compile(r"snapshot-([0-9]{20})\.snap")


def wal_name(number: int) -> str:
    """The file name of WAL segment `number` (>= 1)."""
    if type(number) is not int or not 1 <= number <= MAX_NUMBER:
        raise ValueError(f"segment number {number!r} is outside 1..{MAX_NUMBER}")
    return f"wal-{number:020d}.log"


def snapshot_name(seq: int) -> str:
    """The file name of the snapshot through sequence `seq` (>= 0)."""
    if type(seq) is not int or not 0 <= seq <= MAX_NUMBER:
        raise ValueError(f"snapshot sequence {seq!r} is outside 0..{MAX_NUMBER}")
    return f"snapshot-{seq:020d}.snap"


def parse_wal_name(name: str) -> int | None:
    """The segment number of `name`, or None if it is not exactly a segment name."""
    match = _WAL_RE.fullmatch(name)
    if match is None:
        return None
    number = int(match.group(1))
    return number if number >= 1 else None


def parse_snapshot_name(name: str) -> int | None:
    """The sequence of snapshot file `name`, or None if it is not exactly a snapshot name."""
    match = _SNAPSHOT_RE.fullmatch(name)
    return None if match is None else int(match.group(1))


@dataclass(slots=True)
class DirectoryListing:
    """What a directory holds, sorted by name into the kinds of docs/FORMAT.md §3 (nothing is opened)."""

    segments: dict[int, str] = field(default_factory=dict)
    snapshots: dict[int, str] = field(default_factory=dict)
    temps: list[str] = field(default_factory=list)
    has_current: bool = False
    has_lock: bool = False
    others: list[str] = field(default_factory=list)

    @property
    def segment_numbers(self) -> list[int]:
        """The segments' numbers in ascending order: the order the log is read in."""
        return sorted(self.segments)

    @property
    def foreign(self) -> bool:
        """Only files WALQueue never writes, and at least one: not a store (a mistyped path).

        An empty directory is a new store; one holding any store file
        (CURRENT, LOCK, a segment, a snapshot, a temporary file) is a store,
        however damaged.
        """
        store_files = self.segments or self.snapshots or self.temps or self.has_current or self.has_lock
        return bool(self.others) and not store_files


def list_directory(directory: StoreDirectory | str | os.PathLike[str]) -> DirectoryListing:
    """Classify every entry of `directory` by name (nothing is opened)."""
    listing = DirectoryListing()
    for name in as_store_directory(directory).listdir():
        number = parse_wal_name(name)
        if number is not None:
            listing.segments[number] = name
            continue
        seq = parse_snapshot_name(name)
        if seq is not None:
            listing.snapshots[seq] = name
        elif name == CURRENT_NAME:
            listing.has_current = True
        elif name == LOCK_NAME:
            listing.has_lock = True
        elif name.endswith(TMP_SUFFIX):
            listing.temps.append(name)
        else:
            listing.others.append(name)
    return listing
