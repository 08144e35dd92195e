"""A PD prefill's bootstrap server accepts (SGLang's decode fetches the prefill's KV layout there).

A bootstrap server that could not bind logs ``Server error:`` and the server
goes on, ``/health`` 200: that line fails the prefill as it comes; this check
catches a port nothing answers on. The port is the config's, else what the
server says in ``/server_info``, else SGLang's default.
"""

from __future__ import annotations

from pdtui.config import DEFAULT_BOOTSTRAP_PORT, ServiceConfig
from pdtui.hosts.base import LOOPBACK_ADDRESS
from pdtui.hosts.http import HttpProber
from pdtui.servers.sglang.server_info import read_server_info
from pdtui.servers.sglang.signatures import BOOTSTRAP
from pdtui.vocabulary.checks import Check, Probed, reported_port, tcp_check


async def bootstrap_port(prober: HttpProber, port: int, address: str = LOOPBACK_ADDRESS) -> int:
    """The bootstrap port a PD prefill says it serves (``/server_info``, ``/get_server_info`` on older
    builds), or SGLang's default when it does not say."""
    info = await read_server_info(prober, port, address)
    return (reported_port(info.get("disaggregation_bootstrap_port")) if info else None) or DEFAULT_BOOTSTRAP_PORT


class BootstrapAccepts:
    name = BOOTSTRAP

    def applies(self, cfg: ServiceConfig) -> bool:
        return cfg.role == "prefill" and bool(cfg.port) and not cfg.follower     # rank 0's alone

    async def run(self, probed: Probed) -> Check:
        learned = probed.learned
        if learned.bootstrap_port is None:
            assert probed.cfg.port is not None
            learned.bootstrap_port = probed.cfg.bootstrap_port or await bootstrap_port(
                probed.prober, probed.cfg.port, probed.address)
        check = await tcp_check(probed.host, learned.bootstrap_port, probed.address)
        return Check(BOOTSTRAP, check.ok, f"bootstrap server {check.detail}", check.latency)
