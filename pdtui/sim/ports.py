"""Free TCP ports on 127.0.0.1, chosen at run time (never assume a fixed port is free)."""

from __future__ import annotations

import socket

_given: set[int] = set()


def free_port() -> int:
    """A port nobody listens on right now (the OS picks it from its ephemeral range), and one this
    process has not been given before.

    Ports are asked for in a row (prefill, decode, router, bootstrap) and bound
    later by other processes; the OS may pick a port it picked a moment ago, as
    nobody holds it yet: two services would then be given the same port.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _given:
            _given.add(port)
            return port
