"""The service's ``ready.http`` path answers 2xx."""

from __future__ import annotations

from pdtui.config import ServiceConfig
from pdtui.hosts.base import LOOPBACK_ADDRESS
from pdtui.hosts.http import HttpProber, marked
from pdtui.vocabulary.checks import Check, Probed


def polled(cfg: ServiceConfig, path: str) -> str:
    """``path`` as pdtui asks it of ``cfg`` again and again: with its mark at a server, so that the access lines it
    makes there are folded out of the panel (hosts/http.py); a router's API as it is."""
    return path if cfg.is_router else marked(path)


async def http_check(prober: HttpProber, port: int, path: str, address: str = LOOPBACK_ADDRESS, *,
                     sent: str | None = None) -> Check:
    """``path``'s answer, named for it; ``sent``: the path as asked, when it differs (:func:`polled`)."""
    result = await prober.get(port, sent or path, address=address)
    return Check(f"http {path}", result.ok, result.describe(), result.latency)


class HttpAnswers:
    name = "http"

    def applies(self, cfg: ServiceConfig) -> bool:
        return bool(cfg.ready.http and cfg.port)

    async def run(self, probed: Probed) -> Check:
        cfg = probed.cfg
        assert cfg.port is not None and cfg.ready.http is not None
        return await http_check(probed.prober, cfg.port, cfg.ready.http, probed.address,
                                sent=polled(cfg, cfg.ready.http))
