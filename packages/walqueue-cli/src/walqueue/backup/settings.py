"""What walqueue-serve's parser needs of backup before any replica is named: defaults and the age syntax.

Kept apart from the replicator and the restore so that parsing a command
line (`serving.py`, `cli.py`) imports neither: `walqueue-serve` without
``--replicate`` never loads them (docs/PERFORMANCE.md, start-up).
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_MAX_HOLD_BYTES", "duration"]

#: The most an unreachable store may keep on disk before the backup is declared broken (1 GiB).
DEFAULT_MAX_HOLD_BYTES = 2**30


def duration(text: str) -> float:
    """An age as the retention options take it: a whole number of s, m, h or d (``7d``); in seconds."""
    match = re.fullmatch(r"([0-9]+)([smhd])", text)
    if match is None:
        raise ValueError(text)
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
