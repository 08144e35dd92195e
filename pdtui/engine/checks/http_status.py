"""The service's ``ready.http`` path answers 2xx: its health, asked where it costs the server least.

A server whose engine answers its health without generating on another path (SGLang's ``/ready`` for
``/health``, which runs a one-token generation and answers a second later at the soonest) is asked there; the
first 404 says its release lacks that path, and from then on this start asks the configured one.
"""

from __future__ import annotations

from pdtui.config import ServiceConfig
from pdtui.hosts.http import marked
from pdtui.vocabulary.checks import Check, Probed


def polled(cfg: ServiceConfig, path: str) -> str:
    """``path`` as pdtui asks it of ``cfg`` again and again: with its mark at a server, so that the access lines it
    makes there are folded out of the panel (hosts/http.py); a router's API as it is."""
    return path if cfg.is_router else marked(path)


async def health_check(probed: Probed) -> Check:
    """The service's health: its ``ready.http`` path's answer, or its engine's answer that says the same without
    generating while its server serves that path (learned per start)."""
    cfg, learned = probed.cfg, probed.learned
    assert cfg.port is not None and cfg.ready.http is not None
    path = learned.health_path or cfg.ready.http
    result = await probed.prober.get(cfg.port, polled(cfg, path), address=probed.address)
    if path != cfg.ready.http and result.status == 404:
        learned.health_path = path = cfg.ready.http         # a release without it
        result = await probed.prober.get(cfg.port, polled(cfg, path), address=probed.address)
    return Check(f"http {path}", result.ok, result.describe(), result.latency)


class HttpAnswers:
    name = "http"

    def applies(self, cfg: ServiceConfig) -> bool:
        return bool(cfg.ready.http and cfg.port)

    async def run(self, probed: Probed) -> Check:
        return await health_check(probed)
