"""Continuous backup to object storage and point-in-time restore (docs/guide/backup.md).

layout.py      the replica's object names, log objects, snapshot manifests, the chain (pure)
objectstore.py ObjectStore (put/get/list/delete, conditional puts), its errors and key rule
stores.py      file:// and open_store(url)
s3.py          s3:// through boto3 (the optional extra: pip install 'walqueue-cli[s3]')
lease.py       exactly one writer per replica: the lease object and its fencing number
localread.py   the local store read beside the writer: frames after a cursor, the base snapshot
replicator.py  Replicator: the thread beside the writer, the hold, sync mode, status
restore.py     the plan, the restore into a new directory, retention
cli.py         walqueue-restore
settings.py    the defaults and the age syntax walqueue-serve's parser needs (light: no replicator)

The names below load on first use (PEP 562), so a module of the package
(walqueue-serve's options, `serving.py`) imports without the replicator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walqueue.backup.replicator import Replicator
    from walqueue.backup.stores import FileStore, ObjectStore, PreconditionFailed, StoreUnavailable, open_store

__all__ = ["FileStore", "ObjectStore", "PreconditionFailed", "Replicator", "StoreUnavailable", "open_store"]

#: Where each public name lives.
_HOMES = {"Replicator": "walqueue.backup.replicator"} | dict.fromkeys(
    ("FileStore", "ObjectStore", "PreconditionFailed", "StoreUnavailable", "open_store"), "walqueue.backup.stores"
)


def __getattr__(name: str) -> Any:
    """A public name on first use, imported from its module."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
