"""CURRENT: the one-frame pointer that publishes a snapshot.

Replacing CURRENT is the commit point of a compaction, so it is only ever
replaced atomically (temp file, fsync, rename, fsync of the directory), in two
steps so that the engine can report the phase between them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from walqueue.format.directory import StoreDirectory, as_store_directory
from walqueue.format.errors import CorruptStore
from walqueue.format.frame import decode_frame, encode_frame
from walqueue.format.fsutil import read_all, write_all
from walqueue.format.jsonfields import fields_json
from walqueue.format.names import CURRENT_NAME, CURRENT_TMP_NAME, MAX_NUMBER, parse_snapshot_name

__all__ = ["CURRENT_MAX_BYTES", "Current", "publish_current", "read_current", "write_current_tmp"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIELDS = frozenset({"current", "snapshot", "seq", "size", "sha256", "wal"})


@dataclass(frozen=True, slots=True)
class Current:
    """The published pointer: which snapshot, and the first live WAL segment after it."""

    snapshot: str
    seq: int
    size: int
    sha256: str
    wal: int

    def to_json(self) -> dict[str, Any]:
        """The fields as CURRENT's JSON object holds them (what `write_current_tmp` frames, and what reports show)."""
        return {"current": 1, **fields_json(self)}


def _is_int(value: Any, minimum: int) -> bool:
    return type(value) is int and value >= minimum


def current_from_json(value: Any, path: str | None = None) -> Current:
    """Validate a decoded CURRENT body; any deviation is `CorruptStore`."""
    if not isinstance(value, dict):
        raise CorruptStore(path, 0, "CURRENT is not a JSON object")
    if set(value) != _FIELDS:
        raise CorruptStore(path, 0, f"CURRENT has fields {sorted(value)}, expected {sorted(_FIELDS)}")
    if type(value["current"]) is not int or value["current"] != 1:
        raise CorruptStore(path, 0, f"unknown CURRENT version {value['current']!r}")
    name = value["snapshot"]
    if not isinstance(name, str) or parse_snapshot_name(name) is None:
        raise CorruptStore(path, 0, f"CURRENT names {name!r}, which is not a snapshot file name")
    if not _is_int(value["seq"], 0) or parse_snapshot_name(name) != value["seq"]:
        raise CorruptStore(path, 0, f"CURRENT seq {value['seq']!r} does not match snapshot {name}")
    if not _is_int(value["size"], 0):
        raise CorruptStore(path, 0, f"CURRENT size {value['size']!r} is not a byte count")
    if not isinstance(value["sha256"], str) or not _HEX64.fullmatch(value["sha256"]):
        raise CorruptStore(path, 0, "CURRENT sha256 is not 64 lowercase hex digits")
    # A segment number must fit the 20 digits of a segment name (wal_name would refuse it later).
    if not _is_int(value["wal"], 1) or value["wal"] > MAX_NUMBER:
        raise CorruptStore(path, 0, f"CURRENT wal {value['wal']!r} is not a segment number")
    return Current(name, value["seq"], value["size"], value["sha256"], value["wal"])


#: The most bytes a CURRENT file can hold: its one frame carries six short
#: fields (a 35-character name, a 64-digit hex digest, three numbers), well
#: under 300 bytes. A larger file is refused before it is read.
CURRENT_MAX_BYTES = 4096


def read_current(directory: StoreDirectory | str | os.PathLike[str]) -> Current | None:
    """Read and validate CURRENT; None when the directory has none.

    CURRENT must be a regular file (a FIFO, a device or a symlink there is
    `CorruptStore`, and is never opened for reading) of at most
    `CURRENT_MAX_BYTES`.
    """
    store = as_store_directory(directory)
    path = store.file_path(CURRENT_NAME)
    try:
        fd = store.open_regular(CURRENT_NAME, "CURRENT", max_size=CURRENT_MAX_BYTES)
    except FileNotFoundError:
        return None
    try:
        data = read_all(fd, CURRENT_MAX_BYTES)
    finally:
        os.close(fd)
    return current_from_json(decode_frame(data, path), path)


def write_current_tmp(
    directory: StoreDirectory | str | os.PathLike[str], current: Current, *, sync: bool = True
) -> None:
    """Write and fsync CURRENT.tmp (step one of the atomic replacement).

    A leftover CURRENT.tmp (or a symlink under that name) is removed first,
    and the file is created afresh with ``O_EXCL``: nothing is ever written
    through a name that already exists.
    """
    store = as_store_directory(directory)
    data = encode_frame(current.to_json())
    store.clear_obstacle(CURRENT_TMP_NAME)
    fd = store.create(CURRENT_TMP_NAME)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def publish_current(directory: StoreDirectory | str | os.PathLike[str], *, sync: bool = True) -> None:
    """Rename CURRENT.tmp over CURRENT and fsync the directory (step two)."""
    store = as_store_directory(directory)
    store.replace(CURRENT_TMP_NAME, CURRENT_NAME)
    if sync:
        store.fsync()
