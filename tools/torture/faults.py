"""The OS-fault injector: `OSError` at the k-th watched `os` call, shared by the os-faults and background campaigns."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: Not `posix_fallocate`: a refused preallocation is a fallback (the segment grows at each write), never an error.
FAULTABLE = ("write", "fsync", "fdatasync", "replace", "rename", "unlink", "open", "ftruncate")
#: The calls that make data durable: skipped when they do not fail (no power is lost here).
SYNCS = ("fsync", "fdatasync")
FAULT_ERRNOS = (errno.ENOSPC, errno.EIO)


class FaultInjector:
    """Wraps `os.<name>` for the names in FAULTABLE; while armed, counts calls and fails call `fail_at`.

    The engine and the format layer call these through the `os` module at
    call time, so the wrapper sees every one of them. No power is lost in
    this campaign, so a counted fsync that does not fail is skipped: it
    could change nothing that a reopen in this process sees.

    `threads` says whose calls are counted: ``"caller"`` (the thread that
    armed it: a background snapshot's thread runs alongside and fails no
    call of the caller), ``"others"`` (every other thread: the background
    snapshot's, for the background campaign) or ``"all"``. `before`, if set,
    runs before each counted call with its index and name (the background
    campaign copies the directory there: a death just before that call);
    os calls made inside it are neither counted nor faulted. `hold`, if set,
    makes each counted fsync wait until it is set (so that callers pile up
    behind it) before it fails or returns.
    """

    def __init__(self) -> None:
        self.armed = False
        self.thread = threading.current_thread()
        self.threads = "caller"
        self.calls: list[str] = []
        #: The file each counted call acted on (a name, or "" when it is not known).
        self.targets: list[str] = []
        self.fail_at: int | None = None
        self.error_number = errno.EIO
        self.raised: OSError | None = None
        self.before: Callable[[int, str], None] | None = None
        self.hold: threading.Event | None = None
        #: (descriptor, bytes) of every os.write that succeeded while armed.
        self.written: list[tuple[int, bytes]] = []
        self._originals: dict[str, Callable[..., Any]] = {}
        self._count_lock = threading.Lock()
        self._inside = threading.local()

    def install(self) -> None:
        for name in FAULTABLE:
            original = getattr(os, name)
            self._originals[name] = original
            setattr(os, name, self._wrap(name, original))

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(os, name, original)
        self._originals.clear()

    def arm(
        self,
        fail_at: int | None,
        error_number: int = errno.EIO,
        *,
        threads: str = "caller",
        before: Callable[[int, str], None] | None = None,
        hold: threading.Event | None = None,
    ) -> None:
        assert threads in ("caller", "others", "all")
        self.thread = threading.current_thread()
        self.threads = threads
        self.calls = []
        self.targets = []
        self.written = []
        self.fail_at = fail_at
        self.error_number = error_number
        self.raised = None
        self.before = before
        self.hold = hold
        self.armed = True

    def disarm(self) -> None:
        self.armed = False

    def _watched(self) -> bool:
        if not self.armed or getattr(self._inside, "active", False):
            return False
        if self.threads == "all":
            return True
        return (threading.current_thread() is self.thread) == (self.threads == "caller")

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def faulty(*args: Any, **kwargs: Any) -> Any:
            if self._watched():
                with self._count_lock:
                    index = len(self.calls)
                    self.calls.append(name)
                    self.targets.append(_call_target(name, args))
                if self.before is not None:
                    self._inside.active = True
                    try:
                        self.before(index, name)
                    finally:
                        self._inside.active = False
                if name in SYNCS and self.hold is not None:
                    self.hold.wait()
                if index == self.fail_at:
                    message = f"injected {errno.errorcode[self.error_number]} at os.{name} (call {index})"
                    self.raised = OSError(self.error_number, message)
                    raise self.raised
                if name in SYNCS:
                    return None
                if name == "write":
                    count = original(*args, **kwargs)
                    self.written.append((args[0], bytes(memoryview(args[1])[:count])))
                    return count
            return original(*args, **kwargs)

        faulty.__wrapped__ = original  # type: ignore[attr-defined]
        return faulty


def _call_target(name: str, args: tuple[Any, ...]) -> str:
    """The base name of the file an os call acts on (by path argument, or by its descriptor)."""
    if not args:
        return ""
    first = args[0]
    if isinstance(first, int) and name in ("write", *SYNCS, "ftruncate"):
        try:
            return os.path.basename(os.readlink(f"/proc/self/fd/{first}"))
        except OSError:
            return ""
    if isinstance(first, (str, bytes, os.PathLike)):
        return os.path.basename(os.fsdecode(first))
    return ""


def transactions_written(written: list[tuple[int, bytes]]) -> int:
    """How many complete WAL transaction frames the successful writes of one step hold.

    This is what CONTRACT §4 rule 6 turns on, read from the bytes themselves, so
    it needs no hook: each descriptor's writes of the step start at a frame
    boundary (appends, a new snapshot, a new CURRENT.tmp), so each stream
    parses from its start; only bodies of the form {"seq", "ops"} count.
    """
    streams: dict[int, bytearray] = {}
    for fd, data in written:
        streams.setdefault(fd, bytearray()).extend(data)
    complete = 0
    for stream in streams.values():
        offset = 0
        while offset + 4 <= len(stream):
            (length,) = struct.unpack(">I", stream[offset : offset + 4])
            end = offset + 4 + length + 32
            if end > len(stream):
                break
            body = json.loads(stream[offset + 4 : offset + 4 + length])
            if isinstance(body, dict) and set(body) == {"seq", "ops"}:
                complete += 1
            offset = end
    return complete


@contextlib.contextmanager
def injected(injector: FaultInjector) -> Iterator[FaultInjector]:
    injector.install()
    try:
        yield injector
    finally:
        injector.disarm()
        injector.uninstall()
