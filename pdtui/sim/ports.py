"""Free TCP ports on 127.0.0.1, chosen at run time (never assume a fixed port is free)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """Return a port nobody listens on right now (the OS picks it from its ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
