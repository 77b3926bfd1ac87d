"""What every replica store is: the `ObjectStore` interface, its errors and its key rule.

Kept apart from the stores themselves (stores.py: `file://` and the URL
opener; s3.py: the optional extra) so that each store imports the interface
and the opener imports the stores, with no circle between them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from typing import BinaryIO, Protocol

from walqueue.format.errors import WalQueueError

__all__ = [
    "CHUNK_BYTES",
    "ObjectStore",
    "PreconditionFailed",
    "StoreUnavailable",
    "Tally",
    "UsageError",
    "check_key",
    "chunks",
]

#: The piece a snapshot is copied in, up and down: what a stream holds in memory at once (1 MiB).
CHUNK_BYTES = 2**20

_KEY = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")


class PreconditionFailed(WalQueueError):
    """A conditional put was refused: the key exists (if_none_match) or changed (if_match)."""


class StoreUnavailable(WalQueueError):
    """The store did not answer as it should; a later attempt may succeed."""


class UsageError(WalQueueError, ValueError):
    """A replica URL or option that cannot work (a bad scheme, the S3 extra missing)."""


class ObjectStore(Protocol):
    """What a replica is kept in."""

    url: str

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        """Store `data` under `key`; return its etag. `PreconditionFailed` if a condition fails."""
        ...

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and etag, or None if there is none."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Every key that starts with `prefix`, sorted."""
        ...

    def delete(self, key: str) -> None:
        """Remove `key` (nothing if it is gone already)."""
        ...

    def put_file(self, key: str, source: BinaryIO, size: int, *, if_none_match: bool = False) -> str:
        """Store the `size` bytes `source` holds from its position, read in pieces (a snapshot); its etag."""
        ...

    def read_into(self, key: str, sink: Callable[[bytes], object]) -> bool:
        """Hand the object's bytes to `sink` piece by piece (a snapshot); False if there is none."""
        ...


class Tally:
    """A sink that hashes and counts the pieces it is handed, then passes them on: a streamed object's check."""

    def __init__(self, then: Callable[[bytes], object] | None = None) -> None:
        self.digest = hashlib.sha256()
        self.size = 0
        self.then = then

    def __call__(self, piece: bytes) -> None:
        self.digest.update(piece)
        self.size += len(piece)
        if self.then is not None:
            self.then(piece)

    def matches(self, size: int, sha256: str | None) -> bool:
        """Whether what passed is `size` bytes with SHA-256 `sha256`."""
        return self.size == size and self.digest.hexdigest() == sha256


def chunks(source: BinaryIO, size: int, piece: int = CHUNK_BYTES) -> Iterator[bytes]:
    """`size` bytes of `source` in pieces of at most `piece`; an `OSError` if it ends sooner."""
    left = size
    while left > 0:
        data = source.read(min(piece, left))
        if not data:
            raise OSError(f"the file ended {left} bytes short of the {size} it was to hold")
        left -= len(data)
        yield data


def check_key(key: str) -> str:
    """Refuse a key that could leave the replica's root (``..``, an absolute path, odd characters)."""
    if not _KEY.fullmatch(key) or any(part in (".", "..") for part in key.split("/")):
        raise ValueError(f"object key {key!r} is not a replica key")
    return key
