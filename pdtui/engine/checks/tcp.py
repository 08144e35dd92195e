"""The service's port accepts a TCP connection (``ready.tcp``)."""

from __future__ import annotations

import time

from pdtui.config import ServiceConfig
from pdtui.engine.checks.base import Check, Probed
from pdtui.hosts.base import LOOPBACK_ADDRESS, Host, HostError


async def tcp_check(host: Host, port: int, address: str = LOOPBACK_ADDRESS) -> Check:
    started = time.perf_counter()
    try:
        _, writer = await host.open_tcp(port, timeout=3, address=address)
    except (OSError, HostError) as exc:
        return Check("tcp", False, f"port {port} not accepting ({exc})")
    writer.close()
    return Check("tcp", True, f"port {port} accepting", time.perf_counter() - started)


class TcpAccepts:
    name = "tcp"

    def applies(self, cfg: ServiceConfig) -> bool:
        return bool(cfg.ready.tcp and cfg.port)

    async def run(self, probed: Probed) -> Check:
        assert probed.cfg.port is not None
        return await tcp_check(probed.host, probed.cfg.port, probed.address)
