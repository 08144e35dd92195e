"""Free TCP ports on 127.0.0.1, chosen at run time (never assume a fixed port is free).

A port is handed out now and bound later by another process (a server, a router, an sshd), so
"free" must hold until then. Two things break it when the OS picks the port (binding port 0):
the kernel hands the same ephemeral port to the next process that asks before anybody listens
on it (another test worker, a child process), and every outgoing connection on the machine takes
its local port from that same ephemeral range. So ports are taken below the ephemeral range,
where the kernel never picks one by itself, in turn from one counter that every process of this
user shares (a locked file in /tmp, whatever the process's TMPDIR): a port comes round again only
after the whole range has been given.
"""

from __future__ import annotations

import fcntl
import os
import socket
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
"""Where the shared counter lives: one place for every process of the user, whatever its TMPDIR (a process
given a folder of its own as TMPDIR, as Slurm's daemons are, still takes its turn)."""


def _counter() -> Path:
    return COUNTER_DIR / f"pdtui-ports-{os.getuid()}"


def free_port() -> int:
    """A port nobody listens on right now, not handed out recently to any process of this user."""
    first, end = _range()
    fd = os.open(_counter(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
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
