"""A running SGLang server's own account of itself: ``/server_info`` (``/get_server_info`` before 0.5, and a
deprecated alias since), its resolved server arguments and its ``version``, flat."""

from __future__ import annotations

from typing import Any

from pdtui.hosts.base import LOOPBACK_ADDRESS
from pdtui.hosts.http import HttpProber

PATHS = ("/server_info", "/get_server_info")


async def read_server_info(prober: HttpProber, port: int, address: str = LOOPBACK_ADDRESS) -> dict[str, Any] | None:
    """Its ``/server_info`` as a dict, None when neither path answers one (or nothing answers at all)."""
    for path in PATHS:
        result = await prober.get(port, path, address=address)
        if result.status is None:
            return None         # no HTTP server there yet: the other path would not answer either
        info = result.json() if result.ok else None
        if isinstance(info, dict):
            return info
    return None
