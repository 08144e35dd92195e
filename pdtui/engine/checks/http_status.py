"""The service's ``ready.http`` path answers 2xx."""

from __future__ import annotations

from pdtui.config import ServiceConfig
from pdtui.engine.checks.base import Check, Probed
from pdtui.engine.http import HttpProber, marked
from pdtui.hosts.base import LOOPBACK_ADDRESS


async def http_check(prober: HttpProber, port: int, path: str, address: str = LOOPBACK_ADDRESS, *,
                     mark: bool = False) -> Check:
    """``path``'s answer; ``mark``: asked with pdtui's mark (a server's access log then tells it as pdtui's)."""
    result = await prober.get(port, marked(path) if mark else path, address=address)
    return Check(f"http {path}", result.ok, result.describe(), result.latency)


class HttpAnswers:
    name = "http"

    def applies(self, cfg: ServiceConfig) -> bool:
        return bool(cfg.ready.http and cfg.port)

    async def run(self, probed: Probed) -> Check:
        cfg = probed.cfg
        assert cfg.port is not None and cfg.ready.http is not None
        return await http_check(probed.prober, cfg.port, cfg.ready.http, probed.address, mark=not cfg.is_router)
