"""Free TCP ports on 127.0.0.1, chosen at run time (never assume a fixed port is free).

A port is handed out now and bound later by another process (a server, a router, an sshd), so
"free" must hold until then. Two things break it when the OS picks the port (binding port 0):
the kernel hands the same ephemeral port to the next process that asks before anybody listens
on it (another test worker, a child process), and every outgoing connection on the machine takes
its local port from that same ephemeral range. So ports are taken below the ephemeral range,
where the kernel never picks one by itself, in turn from one counter that every process of this
user shares (a locked file in the user's private folder in /tmp, whatever the process's TMPDIR): a port comes round again only
after the whole range has been given.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
import time
from pathlib import Path

_SPAN = 16384
"""How many ports below the ephemeral range are taken in turn."""

_LOWEST = 1024


def _range() -> tuple[int, int]:
    """The ports to hand out, ``[first, end)``: the span just below the kernel's ephemeral range."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(_LOWEST, low - _SPAN), low


def port_is_free(port: int) -> bool:
    """Whether nobody holds ``port`` on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


COUNTER_DIR = Path("/tmp")
"""Where the shared counter's private folder is made: one place for every process of the user, whatever its TMPDIR (a
process given a folder of its own as TMPDIR, as Slurm's daemons are, still takes its turn)."""

LOCK_WAIT = 30.0
"""Seconds to wait for the counter's lock: a process holds it for microseconds, so a lock held longer is somebody's
doing, and a demo says so instead of hanging."""


def _private_folder() -> Path:
    """``COUNTER_DIR/pdtui-UID``, made 0700 and checked to be this user's own real folder that nobody else may write.

    In a shared folder such as /tmp another user may plant a symlink or a folder at the name beforehand; a folder that
    is not this user's private one is refused, never used."""
    uid = os.getuid()
    folder = COUNTER_DIR / f"pdtui-{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    facts = os.lstat(folder)
    if not stat.S_ISDIR(facts.st_mode) or facts.st_uid != uid or facts.st_mode & 0o077:
        kind = "a folder" if stat.S_ISDIR(facts.st_mode) else "not a folder"
        raise OSError(f"{folder} is {kind} of uid {facts.st_uid}, mode {stat.S_IMODE(facts.st_mode):04o}: not a private "
                      f"folder of uid {uid}; pdtui keeps its port counter there, so remove it")
    return folder


def _open_counter() -> int:
    """The counter's file, opened without following a link and checked to be this user's own regular file."""
    fd = os.open(_private_folder() / "ports", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    facts = os.fstat(fd)
    if not stat.S_ISREG(facts.st_mode) or facts.st_uid != os.getuid():
        os.close(fd)
        raise OSError(f"{_private_folder() / 'ports'} is not a regular file of uid {os.getuid()}")
    return fd


def _lock(fd: int) -> None:
    """The counter's lock, waited for at most ``LOCK_WAIT`` seconds."""
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise OSError(f"the port counter in {COUNTER_DIR / f'pdtui-{os.getuid()}'} stayed locked for "
                              f"{LOCK_WAIT:g}s by another process") from None
            time.sleep(0.005)


def free_port() -> int:
    """A port nobody listens on right now, not handed out recently to any process of this user."""
    first, end = _range()
    fd = _open_counter()
    try:
        _lock(fd)
        text = os.read(fd, 32).decode(errors="replace").strip()
        nxt = int(text) if text.isdigit() and first <= int(text) < end else first
        for _ in range(end - first):
            port, nxt = nxt, (first if nxt + 1 >= end else nxt + 1)
            if port_is_free(port):
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.write(fd, str(nxt).encode())
                return port
        raise OSError(f"no free port on 127.0.0.1 in {first}-{end - 1}")
    finally:
        os.close(fd)
