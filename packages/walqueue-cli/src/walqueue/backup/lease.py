"""The replica's lease: exactly one replicator writes to a replica, fenced by a number.

``lease.json`` holds the holder (a token drawn at start), the store it
ships (host and directory), a fencing number and an expiry (the holder's
clock). It is only ever written conditionally: created with
``if_none_match``, renewed or taken over with ``if_match`` on the etag read.
A second replicator finds a live lease held by another and stops
(`LeaseHeld`) -- unless the holder is this very store (the same host and
directory) restarted after a crash: the directory's LOCK already makes
that one writer, and the takeover raises the fence; one whose renewal is refused has lost it and stops
(`LeaseLost`). The fence goes into every log object's name, and a restore
never follows a lower fence after a higher one: an old holder that has
not noticed yet cannot interleave its objects into the new holder's chain.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from walqueue.backup.layout import LEASE_KEY
from walqueue.backup.stores import ObjectStore, PreconditionFailed
from walqueue.format.errors import WalQueueError

__all__ = ["Lease", "LeaseHeld", "LeaseLost", "store_identity"]


class LeaseHeld(WalQueueError):
    """Another replicator holds the replica's lease: this one must not write there."""


class LeaseLost(WalQueueError):
    """This replicator's lease was taken over (or the replica changed under it): it stops writing."""


def store_identity(path: str) -> str:
    """Who ships: the host and the store's directory (shown to the operator a lease refuses)."""
    return f"{socket.gethostname()}:{os.path.abspath(path)}"


@dataclass(slots=True)
class Lease:
    """The lease as this replicator holds it."""

    store: ObjectStore
    identity: str
    ttl: float
    holder: str = ""
    fence: int = 0
    expires: float = 0.0
    etag: str = ""

    def _body(self, fence: int, expires: float) -> bytes:
        fields = {"lease": 1, "holder": self.holder, "store": self.identity, "fence": fence, "expires": expires}
        return json.dumps(fields, sort_keys=True).encode()

    def acquire(self, now: float) -> None:
        """Take the lease (new, expired or released), or raise `LeaseHeld` naming its holder."""
        self.holder = uuid.uuid4().hex
        found = self.store.get(LEASE_KEY)
        try:
            if found is None:
                fence = 1
                self.etag = self.store.put(LEASE_KEY, self._body(fence, now + self.ttl), if_none_match=True)
            else:
                data, etag = found
                held = _parse(data)
                # The same store (host and directory) is a previous run of this very writer: the
                # directory's LOCK lets one process own it at a time, so its lease is ours to take over.
                same_store = held.get("store") == self.identity
                if held.get("expires", 0) > now and held.get("holder") and not same_store:
                    raise LeaseHeld(
                        f"{self.store.url} is leased to {held.get('store')!r} (fence {held.get('fence')}) for "
                        f"{held['expires'] - now:.0f} more seconds: another replicator writes there; stop it, "
                        "or give this store another replica URL"
                    )
                fence = int(held.get("fence", 0)) + 1
                self.etag = self.store.put(LEASE_KEY, self._body(fence, now + self.ttl), if_match=etag)
        except PreconditionFailed:
            raise LeaseHeld(f"{self.store.url}: another replicator took the lease at the same moment") from None
        self.fence, self.expires = fence, now + self.ttl

    def renew(self, now: float) -> None:
        """Extend the lease; `LeaseLost` if it is no longer ours."""
        try:
            self.etag = self.store.put(LEASE_KEY, self._body(self.fence, now + self.ttl), if_match=self.etag)
        except PreconditionFailed:
            raise LeaseLost(
                f"{self.store.url}: the lease (fence {self.fence}) was taken by another replicator; "
                "this one stops writing to the replica"
            ) from None
        self.expires = now + self.ttl

    def due(self, now: float) -> bool:
        """Renew before writing when half the lease has run out (or it has expired)."""
        return now >= self.expires - self.ttl / 2

    def release(self) -> None:
        """Give the lease up at a clean stop (expired at once), so a successor need not wait."""
        try:
            self.store.put(LEASE_KEY, self._body(self.fence, 0.0), if_match=self.etag)
        except Exception:  # noqa: BLE001 - a stop never fails on the release; the lease expires by itself
            pass


def _parse(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
