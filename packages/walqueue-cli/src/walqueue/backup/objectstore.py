"""What every replica store is: the `ObjectStore` interface, its errors and its key rule.

Kept apart from the stores themselves (stores.py: `file://` and the URL
opener; s3.py: the optional extra) so that each store imports the interface
and the opener imports the stores, with no circle between them.
"""

from __future__ import annotations

import re
from typing import Protocol

from walqueue.format.errors import WalQueueError

__all__ = ["ObjectStore", "PreconditionFailed", "StoreUnavailable", "UsageError", "check_key"]

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


def check_key(key: str) -> str:
    """Refuse a key that could leave the replica's root (``..``, an absolute path, odd characters)."""
    if not _KEY.fullmatch(key) or any(part in (".", "..") for part in key.split("/")):
        raise ValueError(f"object key {key!r} is not a replica key")
    return key
