"""walqueue.format: WALQueue's bytes and files, readable without the engine.

This layer knows frames, canonical JSON, file names, CURRENT and snapshots,
and nothing of tasks or leases, so that an offline tool (`walqueue-fsck`) or
a reader in another language can be built on it alone. See docs/FORMAT.md.

Reader API for offline tools:

- `read_current(directory)` -> `Current | None`
- `SnapshotReader(path, expected_size=..., expected_sha256=...)` with `.seq`,
  `.count` and `.records()`
- `read_frames(file, path, allow_torn_tail=..., end=SegmentEnd())` for segments
  (`scan_frames`: the same reader yielding `(offset, size, value)` tuples)
- `list_directory(directory)` -> `DirectoryListing`
- `transaction_seq(value, path, offset)` for a WAL frame's envelope

`__version__` is the version of all three distributions (they pin each
other exactly).
"""

from walqueue.format._version import __version__
from walqueue.format.canonical import canonical_json, canonical_str, parse_json
from walqueue.format.current import Current, publish_current, read_current, write_current_tmp
from walqueue.format.errors import CorruptStore, WalQueueError
from walqueue.format.frame import (
    DIGEST_BYTES,
    FRAME_OVERHEAD,
    LENGTH_BYTES,
    MAX_FRAME_BYTES,
    Frame,
    SegmentEnd,
    decode_frame,
    encode_body,
    encode_frame,
    find_complete_frame,
    read_frames,
    scan_frames,
)
from walqueue.format.fsutil import fsync_directory, write_all
from walqueue.format.names import (
    CURRENT_NAME,
    CURRENT_TMP_NAME,
    LOCK_NAME,
    TMP_SUFFIX,
    DirectoryListing,
    list_directory,
    parse_snapshot_name,
    parse_wal_name,
    snapshot_name,
    wal_name,
)
from walqueue.format.snapshot import BODY_TARGET_BYTES, SnapshotInfo, SnapshotReader, file_sha256, write_snapshot
from walqueue.format.transaction import OP_NAMES, transaction_seq

__all__ = [
    "__version__",
    "BODY_TARGET_BYTES",
    "CURRENT_NAME",
    "CURRENT_TMP_NAME",
    "DIGEST_BYTES",
    "FRAME_OVERHEAD",
    "LENGTH_BYTES",
    "LOCK_NAME",
    "MAX_FRAME_BYTES",
    "OP_NAMES",
    "TMP_SUFFIX",
    "CorruptStore",
    "Current",
    "DirectoryListing",
    "Frame",
    "SegmentEnd",
    "SnapshotInfo",
    "SnapshotReader",
    "WalQueueError",
    "canonical_json",
    "canonical_str",
    "decode_frame",
    "encode_body",
    "encode_frame",
    "file_sha256",
    "find_complete_frame",
    "fsync_directory",
    "list_directory",
    "parse_json",
    "parse_snapshot_name",
    "parse_wal_name",
    "publish_current",
    "read_current",
    "read_frames",
    "scan_frames",
    "snapshot_name",
    "transaction_seq",
    "wal_name",
    "write_all",
    "write_current_tmp",
    "write_snapshot",
]
