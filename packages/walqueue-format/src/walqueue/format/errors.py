"""The one error the format layer raises, and the root of every WALQueue error.

`WalQueueError` lives here, not in the engine, because `CorruptStore` must be
the very same class whether it is raised by the offline inspector (which has
no engine) or by `Queue`; the engine re-exports both.
"""

from __future__ import annotations

import os
import shlex


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


def repair_hint(directory: str | os.PathLike[str]) -> str:
    """The next step after opening refused `directory`: where the cause and the repair procedure are.

    Opening stops at the first problem and never repairs; `walqueue-fsck`
    reads on, names the likely cause and what survives, and prints the
    repair guide, which an installed package carries (docs/ is not in the
    wheels).
    """
    return (
        f"run `walqueue-fsck {shlex.quote(os.fspath(directory))}` for the likely cause and what survives, "
        "and `walqueue-fsck --help-repair` for the repair procedure (docs/REPAIR.md)"
    )
