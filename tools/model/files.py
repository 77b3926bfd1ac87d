"""Looking at a queue's directory: digests, frames, WAL bodies, and special files put where a store file is."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from walqueue import Queue

from .rules import MAX_FRAME_BYTES


def directory_digest(directory: str | os.PathLike[str]) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under `directory` (to prove nothing was written)."""
    root = Path(directory)
    digest: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def read_frames(path: str | os.PathLike[str]) -> list[tuple[int, Any]]:
    """(offset, decoded body) of every frame of a segment, snapshot or CURRENT.

    Strict: any incomplete frame or digest mismatch is an `AssertionError`
    (this is a test helper, not the engine's reader). Zeros after the last
    frame (an open queue's preallocated segment) end the frames.
    """
    import json

    data = Path(path).read_bytes()
    frames: list[tuple[int, Any]] = []
    offset = 0
    end_of_frames = len(data.rstrip(b"\x00"))  # at least inside the last frame: its digest may end in zeros
    while offset < end_of_frames:
        assert offset + 4 <= len(data), f"{path}: incomplete length at {offset}"
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        end = offset + 4 + length + 32
        assert 1 <= length <= MAX_FRAME_BYTES and end <= len(data), f"{path}: bad frame at {offset}"
        body = data[offset + 4 : offset + 4 + length]
        assert hashlib.sha256(body).digest() == data[end - 32 : end], f"{path}: digest mismatch at {offset}"
        frames.append((offset, json.loads(body)))
        offset = end
    return frames


@contextmanager
def nothing_written(queue: Queue, directory: str | os.PathLike[str]) -> Iterator[None]:
    """Assert that the block changes no byte of `directory` and no sequence of `queue`."""
    before, seq = directory_digest(directory), queue.last_seq
    yield
    assert directory_digest(directory) == before, "the call changed the directory's bytes"
    assert queue.last_seq == seq


def wal_bodies(directory: str | os.PathLike[str]) -> list[Any]:
    """The decoded body of every WAL frame in `directory`, oldest segment first."""
    return [body for segment in sorted(Path(directory).glob("wal-*.log")) for _, body in read_frames(segment)]


#: The kinds of non-regular entry `place_special` can put where a store file is.
SPECIAL_KINDS = ("fifo", "directory", "dev-zero", "dev-null", "outside-file", "dangling")


def place_special(path: Path, kind: str, outside: Path | None = None) -> None:
    """Replace whatever is at `path` by a non-regular entry of `kind` (one of `SPECIAL_KINDS`).

    `outside-file` is a symlink to `outside`, a file beside the store; the
    others need no target. Used by the special-file tests and the
    environment campaign of tools/torture.py alike.
    """
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dev-null":
        path.symlink_to("/dev/null")
    elif kind == "outside-file":
        assert outside is not None
        path.symlink_to(outside)
    elif kind == "dangling":
        path.symlink_to(path.parent / "no-such-file")
    else:  # pragma: no cover
        raise AssertionError(kind)
