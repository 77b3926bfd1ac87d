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
"""

from walqueue.backup.replicator import Replicator
from walqueue.backup.stores import FileStore, ObjectStore, PreconditionFailed, StoreUnavailable, open_store

__all__ = ["FileStore", "ObjectStore", "PreconditionFailed", "Replicator", "StoreUnavailable", "open_store"]
