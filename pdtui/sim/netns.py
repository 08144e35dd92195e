"""Network namespaces for servers that listen on every address (real SGLang's torch store and Mooncake): one home
for the system calls, which Python 3.11's ``os`` does not have."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
_LIBC = ctypes.CDLL(None, use_errno=True)


def setns(fd: int) -> None:
    """The calling thread into the network namespace ``fd`` refers to (OSError when it cannot)."""
    if _LIBC.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns to another network namespace")


def enter(path: str) -> None:
    """The calling thread into the network namespace at ``path`` (``/proc/PID/ns/net``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        setns(fd)
    finally:
        os.close(fd)


def unshare() -> str | None:
    """This process into a network namespace of its own: root unshares it, anyone else through a user namespace of
    their own, in which they are root. Why it could not be done, or None."""
    if _LIBC.unshare(CLONE_NEWNET) == 0:
        return None
    uid, gid = os.getuid(), os.getgid()
    if _LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return f"no network namespace of its own could be made: {os.strerror(ctypes.get_errno())}"
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    return None
