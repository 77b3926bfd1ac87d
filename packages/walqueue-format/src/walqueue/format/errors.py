"""The one error the format layer raises, and the root of every WALQueue error.

`WalQueueError` lives here, not in the engine, because `CorruptStore` must be
the very same class whether it is raised by the offline inspector (which has
no engine) or by `Queue`; the engine re-exports both.
"""

from __future__ import annotations

import os


class WalQueueError(Exception):
    """Base class of every error WALQueue raises on purpose."""


class CorruptStore(WalQueueError):
    """The directory's bytes break a rule of the disk format.

    Carries the file (`path`), the byte offset where the problem starts
    (`offset`, ``None`` when it concerns a whole file or a missing one) and a
    short `reason`, so that a human can look at exactly those bytes.
    """

    def __init__(self, path: str | os.PathLike[str] | None, offset: int | None, reason: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.offset = offset
        self.reason = reason
        where = self.path if self.path is not None else "<store>"
        if offset is not None:
            where = f"{where} at byte {offset}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.offset, self.reason))
