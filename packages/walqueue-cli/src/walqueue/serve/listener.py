"""The server's Unix socket: taking its path safely, knowing who connects, and leaving nothing behind.

Apart from the loop because these rules are about the file system and the
kernel, not the protocol: a path is taken over only from a dead server
(never from a live one, never when something other than a socket is
there); the socket never exists with a wider mode than asked, not even
for an instant; the file is removed on stop only if it is still the one
this server bound.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import struct
from dataclasses import dataclass

from walqueue import WalQueueError

__all__ = ["Peer", "SocketInUse", "bind_socket", "peer_of", "remove_socket_file"]

log = logging.getLogger("walqueue.serve")

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_BACKLOG = 128


class SocketInUse(WalQueueError):
    """The socket path is answered by another process, or is not a socket at all."""


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is on the other end of a connection (SO_PEERCRED)."""

    pid: int
    uid: int
    gid: int

    def __str__(self) -> str:
        return f"pid={self.pid} uid={self.uid} gid={self.gid}"


def peer_of(connection: socket.socket) -> Peer | None:
    try:
        raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    except (OSError, AttributeError):  # AttributeError: no SO_PEERCRED on this platform
        return None
    return Peer(*_PEERCRED.unpack(raw))


def _clear_stale(path: str) -> None:
    """Remove a socket at `path` that nobody answers on; `SocketInUse` for anything else there."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(status.st_mode):
        raise SocketInUse(f"{path} exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        log.info("replacing the stale socket %s (nothing answers on it)", path)
        os.unlink(path)
    except OSError as error:
        raise SocketInUse(f"{path} is a socket in use ({type(error).__name__}: {error})") from None
    else:
        raise SocketInUse(f"another process answers on {path}")
    finally:
        probe.close()


def bind_socket(path: str, mode: int) -> tuple[socket.socket, int]:
    """Listen on `path` with `mode`, non-blocking; returns the socket and the inode of its file.

    A file at `path` is replaced only if it is a socket nobody answers on
    (left by a killed server). Anything else there, or a socket that
    answers, is `SocketInUse`, and the file is left alone. The socket is
    created under umask 0o177 (never wider than 0600) and then given `mode`
    before it listens, so no client can connect under a wider mode first.
    """
    _clear_stale(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = False
    inode: int | None = None
    try:
        old_umask = os.umask(0o177)
        try:
            listener.bind(path)
            bound = True
        finally:
            os.umask(old_umask)
        inode = os.lstat(path).st_ino
        os.chmod(path, mode)
        listener.listen(_BACKLOG)
        listener.setblocking(False)
        return listener, inode
    except BaseException:
        listener.close()
        if bound:  # a failed start leaves nothing behind
            remove_socket_file(path, inode)
        raise


def remove_socket_file(path: str, inode: int | None) -> None:
    """Unlink `path` if it is still the socket with `inode` (None: whatever socket is there)."""
    try:
        status = os.lstat(path)
        if stat.S_ISSOCK(status.st_mode) and (inode is None or status.st_ino == inode):
            os.unlink(path)
    except FileNotFoundError:
        pass
