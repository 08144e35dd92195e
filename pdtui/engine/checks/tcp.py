"""The service's port accepts a TCP connection (``ready.tcp``): the generic check around vocabulary/checks.py's
:func:`~pdtui.vocabulary.checks.tcp_check`, which a serving engine's own checks run too."""

from __future__ import annotations

from pdtui.config import ServiceConfig
from pdtui.vocabulary.checks import Check, Probed, tcp_check


class TcpAccepts:
    name = "tcp"

    def applies(self, cfg: ServiceConfig) -> bool:
        return bool(cfg.ready.tcp and cfg.port)

    async def run(self, probed: Probed) -> Check:
        assert probed.cfg.port is not None
        return await tcp_check(probed.host, probed.cfg.port, probed.address)
