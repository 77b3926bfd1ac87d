"""The replica's layout and its pure core: object names, log objects, snapshot manifests, the chain.

A replica is a prefix in an object store (docs/guide/backup.md):

```
lease.json                                             who may write here: holder, store, fence, expiry
generations/<G>/snapshots/<seq>.json                   a snapshot's manifest (seq, size, sha256, link, upload time)
generations/<G>/snapshots/<seq>.snap                   the snapshot file's bytes (absent for the empty base, seq 0)
generations/<G>/log/<first>-<last>-<fence>.wal         one header line, then the frames of transactions first..last
```

A generation is one lineage: it starts at a base snapshot (the store's
published one, or the empty store at sequence 0) and grows by log objects,
each cut at transaction boundaries and chained to the previous one by
digest: ``digest = sha256(prev digest + frames)``. The first object's
``prev`` is the generation's root digest. Nothing here does I/O: the
replicator and the restore command hand these functions bytes and names.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from walqueue.format.errors import WalQueueError

__all__ = [
    "ChainError",
    "LogObject",
    "SnapshotManifest",
    "chain_digest",
    "decode_log",
    "encode_log",
    "generation_prefix",
    "log_key",
    "parse_log_key",
    "resolve_chain",
    "root_digest",
]

LEASE_KEY = "lease.json"
GENERATIONS = "generations/"
_DIGITS = 20
_LOG_KEY = re.compile(r"generations/([0-9]{20})/log/([0-9]{20})-([0-9]{20})-([0-9]{10})\.wal")
_MANIFEST_KEY = re.compile(r"generations/([0-9]{20})/snapshots/([0-9]{20})\.json")
_GENERATION = re.compile(r"generations/([0-9]{20})/")


class ChainError(WalQueueError):
    """The replica cannot give an unbroken, digest-checked chain (a gap, a mismatch, a damaged object)."""


def generation_prefix(generation: int) -> str:
    return f"{GENERATIONS}{generation:0{_DIGITS}d}/"


def log_key(generation: int, first: int, last: int, fence: int) -> str:
    return f"{generation_prefix(generation)}log/{first:0{_DIGITS}d}-{last:0{_DIGITS}d}-{fence:010d}.wal"


def manifest_key(generation: int, seq: int) -> str:
    return f"{generation_prefix(generation)}snapshots/{seq:0{_DIGITS}d}.json"


def snapshot_key(generation: int, seq: int) -> str:
    return f"{generation_prefix(generation)}snapshots/{seq:0{_DIGITS}d}.snap"


def parse_log_key(key: str) -> tuple[int, int, int, int] | None:
    """``(generation, first, last, fence)`` of a log object's key, or None."""
    match = _LOG_KEY.fullmatch(key)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]), int(match[4]))


def parse_manifest_key(key: str) -> tuple[int, int] | None:
    """``(generation, seq)`` of a snapshot manifest's key, or None."""
    match = _MANIFEST_KEY.fullmatch(key)
    return None if match is None else (int(match[1]), int(match[2]))


def generations(keys: Iterable[str]) -> list[int]:
    """The generation numbers that `keys` hold, ascending."""
    found = {int(m[1]) for key in keys if (m := _GENERATION.match(key)) is not None}
    return sorted(found)


def root_digest(generation: int, base_sha256: str | None) -> str:
    """The digest a generation's first log object chains to: its number and its base snapshot's digest."""
    return hashlib.sha256(f"walqueue-replica:{generation}:{base_sha256 or ''}".encode()).hexdigest()


def chain_digest(prev: str, frames: bytes) -> str:
    """A log object's digest: chained to `prev`, covering every byte of its frames."""
    hasher = hashlib.sha256(bytes.fromhex(prev))
    hasher.update(frames)
    return hasher.hexdigest()


@dataclass(frozen=True, slots=True)
class LogObject:
    """One log object's header: transactions first..last, chained to `prev`, uploaded at `uploaded`."""

    generation: int
    first: int
    last: int
    fence: int
    prev: str
    digest: str
    uploaded: float
    size: int

    @property
    def key(self) -> str:
        return log_key(self.generation, self.first, self.last, self.fence)


def encode_log(header: LogObject, frames: bytes) -> bytes:
    """The object's bytes: one JSON header line, then the frames exactly as the WAL holds them."""
    fields = {
        "log": 1,
        "generation": header.generation,
        "first": header.first,
        "last": header.last,
        "fence": header.fence,
        "prev": header.prev,
        "digest": header.digest,
        "uploaded": header.uploaded,
        "size": header.size,
    }
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode() + b"\n" + frames


def decode_log(key: str, data: bytes) -> tuple[LogObject, bytes]:
    """The header and frames of a log object, checked against its key and its digest (`ChainError` if not)."""
    named = parse_log_key(key)
    newline = data.find(b"\n")
    if named is None or newline < 0:
        raise ChainError(f"{key}: not a log object")
    try:
        fields: Any = json.loads(data[:newline])
        header = LogObject(
            int(fields["generation"]),
            int(fields["first"]),
            int(fields["last"]),
            int(fields["fence"]),
            str(fields["prev"]),
            str(fields["digest"]),
            float(fields["uploaded"]),
            int(fields["size"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ChainError(f"{key}: a damaged header ({exc})") from None
    frames = data[newline + 1 :]
    if (header.generation, header.first, header.last, header.fence) != named:
        raise ChainError(f"{key}: the header names another object")
    if len(frames) != header.size or chain_digest(header.prev, frames) != header.digest:
        raise ChainError(f"{key}: digest mismatch (a partial or damaged upload)")
    return header, frames


@dataclass(frozen=True, slots=True)
class SnapshotManifest:
    """A snapshot in a generation: `seq`, its file's size and digest, and where the log goes on after it.

    `boundary` is the last object boundary at or before `seq` and `link` the
    chain digest there: a restore from this snapshot follows log objects from
    `boundary` + 1 on (recovery skips the transactions the snapshot covers).
    The base snapshot has ``boundary == seq`` and ``link == root_digest``.
    """

    generation: int
    seq: int
    size: int
    sha256: str | None
    boundary: int
    link: str
    uploaded: float
    fence: int

    def to_bytes(self) -> bytes:
        fields = {"snapshot": 1, **{name: getattr(self, name) for name in self.__slots__}}
        return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, key: str, data: bytes) -> SnapshotManifest:
        try:
            fields: Any = json.loads(data)
            manifest = cls(**{name: fields[name] for name in cls.__slots__})
        except (ValueError, KeyError, TypeError) as exc:
            raise ChainError(f"{key}: a damaged snapshot manifest ({exc})") from None
        if parse_manifest_key(key) != (manifest.generation, manifest.seq):
            raise ChainError(f"{key}: the manifest names another snapshot")
        return manifest


def resolve_chain(
    start: int,
    link: str,
    objects: Iterable[tuple[int, int, int, str]],
    read: Callable[[str, str], str | None] | None = None,
) -> list[str]:
    """The keys of the unbroken chain from boundary `start` (digest `link`), as far as it goes.

    `objects` are ``(first, last, fence, key)`` of one generation's log
    objects. The next object starts at the boundary + 1; when several do (an
    old writer's, fenced off; a retry that took more transactions), the
    highest fence wins, then the longest, and a lower fence never follows a
    higher one. With `read`, a candidate counts only if ``read(key, link)``
    gives its digest (intact, and chained to `link`): a damaged or partial
    object is as good as absent. A later object beyond a missing range is a
    gap, named.
    """
    by_first: dict[int, list[tuple[int, int, str]]] = {}
    for first, last, fence, key in objects:
        by_first.setdefault(first, []).append((fence, last, key))
    chain: list[str] = []
    position, min_fence, refused = start, 0, []
    while True:
        candidates = sorted(
            (c for c in by_first.get(position + 1, []) if c[0] >= min_fence and c[1] >= position + 1), reverse=True
        )
        chosen = None
        for fence, last, key in candidates:
            digest = link if read is None else read(key, link)
            if digest is not None:
                chosen, link = (fence, last, key), digest
                break
            refused.append(key)
        if chosen is None:
            later = sorted(first for first in by_first if first > position + 1)
            if later:
                damaged = f"; damaged or unchained: {', '.join(refused)}" if refused else ""
                raise ChainError(
                    f"gap: transactions {position + 1}..{later[0] - 1} are in no log object "
                    f"(the chain ends at {position}, the next object starts at {later[0]}){damaged}"
                )
            return chain
        fence, last, key = chosen
        chain.append(key)
        position, min_fence = last, fence


def head_of(start: int, keys: list[str]) -> int:
    """The last transaction a chain resolved from boundary `start` reaches."""
    parsed = parse_log_key(keys[-1]) if keys else None
    return start if parsed is None else parsed[2]
