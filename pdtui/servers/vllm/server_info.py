"""A running vLLM server's own account of itself: the model it serves (``/v1/models``: its id, its path, its
maximum length) and its release (``/version``), flat."""

from __future__ import annotations

from typing import Any

from pdtui.hosts.base import LOOPBACK_ADDRESS
from pdtui.hosts.http import HttpProber


async def read_server_info(prober: HttpProber, port: int, address: str = LOOPBACK_ADDRESS) -> dict[str, Any] | None:
    """``{"model", "root", "max_model_len", "version"}`` as far as it tells them; None when it answers neither."""
    models = await prober.get(port, "/v1/models", address=address)
    if models.status is None:
        return None             # no HTTP server there yet
    info: dict[str, Any] = {}
    listed = models.json() if models.ok else None
    data = listed.get("data") if isinstance(listed, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        first = data[0]
        info |= {key: first[key] for key in ("id", "root", "max_model_len") if key in first}
        if "id" in info:
            info["model"] = info.pop("id")
    version = await prober.get(port, "/version", address=address)
    told = version.json() if version.ok else None
    if isinstance(told, dict) and isinstance(told.get("version"), str):
        info["version"] = told["version"]
    return info or None
