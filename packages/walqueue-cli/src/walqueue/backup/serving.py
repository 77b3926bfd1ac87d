"""walqueue-serve's replication options: ``--replicate URL`` and its companions.

The URL is checked when the command line is parsed (a bad scheme, or
``s3://`` without the extra, is a usage error: exit 64, nothing created);
the replicator starts once the queue is open and stops after the server
has stopped, shipping the last transactions first.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from typing import TYPE_CHECKING, Any

from walqueue.backup.settings import DEFAULT_MAX_HOLD_BYTES, duration

if TYPE_CHECKING:
    from walqueue.backup.replicator import Replicator

__all__ = ["add_replicate_arguments", "check_replicate_arguments", "start_replicator"]


#: The options, declared once: flag -> argparse's keywords (added to one group by `add_replicate_arguments`).
_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "--replicate",
        {
            "metavar": "URL",
            "help": "ship every durable transaction to file:///path or s3://bucket/prefix (s3 needs walqueue-cli[s3])",
        },
    ),
    (
        "--replicate-sync",
        {
            "action": "store_true",
            "help": "answer only after the replica holds the transaction (acknowledged means off the box)",
        },
    ),
    (
        "--replicate-interval",
        {"type": float, "default": 1.0, "metavar": "SECONDS", "help": "upload every SECONDS (default 1)"},
    ),
    (
        "--replicate-max-hold",
        {
            "type": int,
            "default": DEFAULT_MAX_HOLD_BYTES,
            "metavar": "BYTES",
            "help": "unshipped log kept while the replica is unreachable before the backup is declared broken "
            "(default 1 GiB)",
        },
    ),
    (
        "--replicate-retain",
        {
            "type": duration,
            "metavar": "AGE",
            "help": "after each new snapshot, delete what no snapshot of the last AGE (7d, 12h, ...) needs; "
            "by the lease holder only (default: keep everything)",
        },
    ),
    ("--replica-endpoint", {"metavar": "URL", "help": "the S3 endpoint (default: AWS_ENDPOINT_URL)"}),
    ("--replica-region", {"metavar": "REGION", "help": "the S3 region (default: AWS_REGION)"}),
)


def add_replicate_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("continuous backup (docs/guide/backup.md)")
    for flag, keywords in _OPTIONS:
        group.add_argument(flag, **keywords)


def check_replicate_arguments(arguments: argparse.Namespace) -> str | None:
    """Why the replication options cannot work (a usage error's message), or None."""
    url = arguments.replicate
    if url is None:
        companion = "--replicate-sync" if arguments.replicate_sync else None
        if arguments.replicate_retain is not None:
            companion = "--replicate-retain"
        return None if companion is None else f"{companion} needs --replicate URL"
    from urllib.parse import urlsplit  # here: walqueue-serve without --replicate never imports urllib

    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            return f"--replicate {url!r}: a file replica is file:///absolute/path"
    elif parts.scheme == "s3":
        if not parts.netloc:
            return f"--replicate {url!r}: an S3 replica is s3://bucket/prefix"
        if importlib.util.find_spec("boto3") is None:
            return "--replicate s3://... needs the S3 extra: pip install 'walqueue-cli[s3]'"
    else:
        return f"--replicate {url!r}: a replica URL starts with file:// or s3://"
    if not 0 < arguments.replicate_interval < math.inf:
        return "--replicate-interval must be a number of seconds > 0"
    if arguments.replicate_max_hold < 1:
        return "--replicate-max-hold must be a byte count >= 1"
    return None


def start_replicator(queue: Any, arguments: argparse.Namespace) -> Replicator | None:
    """Start the replicator beside the served queue (None without --replicate)."""
    if arguments.replicate is None:
        return None
    from walqueue.backup.replicator import Replicator  # here: without --replicate, serve never loads it
    from walqueue.backup.stores import open_store

    store = open_store(arguments.replicate, endpoint=arguments.replica_endpoint, region=arguments.replica_region)
    return Replicator(
        queue,
        store,
        interval=arguments.replicate_interval,
        sync=arguments.replicate_sync,
        max_hold_bytes=arguments.replicate_max_hold,
        retain=arguments.replicate_retain,
    ).start()
