"""What a check is: its result (:class:`Check`), what it is given (:class:`Probed`), and what it implements
(:class:`ReadinessCheck`); and the one check both the engine and a serving engine run, a port accepting TCP
(:func:`tcp_check`).

Here, below both, because the engine's generic checks (engine/checks/) and a serving engine's own (SGLang's
bootstrap server, servers/sglang/bootstrap_check.py) are the same kind of thing: neither imports the other for it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pdtui.config import ServiceConfig
from pdtui.hosts.base import LOOPBACK_ADDRESS, Host, HostError
from pdtui.hosts.http import HttpProber


def reported_port(value: object) -> int | None:
    """A port as a server or a router reports it in JSON (``disaggregation_bootstrap_port``, a worker's
    ``bootstrap_port``), None when it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536 else None


# The names under which a router on the same host may list a backend.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"})


@dataclass(frozen=True, slots=True)
class Check:
    """One check's result, as the faces show it."""

    name: str
    ok: bool
    detail: str = ""
    latency: float | None = None
    final: bool = False      # a failure that waiting will not cure


@dataclass(slots=True)
class Learned:
    """What this start's checks learned and keep until the next start (one asks once, then reads it here)."""

    bootstrap_port: int | None = None             # the prefill's bootstrap port, once known
    server_info: Mapping[str, Any] | None = None  # its own account of how it runs (its /server_info), once read
    health_path: str | None = None                # where its health is asked: its engine's answer that does not
                                                  # generate (SGLang's /ready), until the server says it lacks it


class Probed(Protocol):
    """A service as a check sees it: where it runs and how it is reached."""

    @property
    def cfg(self) -> ServiceConfig: ...

    @property
    def host(self) -> Host: ...

    @property
    def prober(self) -> HttpProber: ...

    @property
    def address(self) -> str:
        """Where it listens, as its host sees it (a Slurm job: its node's address)."""

    @property
    def learned(self) -> Learned: ...


class ReadinessCheck(Protocol):
    """One active check of a backend before it is called ready."""

    name: str

    def applies(self, cfg: ServiceConfig) -> bool:
        """Whether this service is checked so (read once per run: a service's config does not change)."""

    async def run(self, probed: Probed) -> Check: ...


async def tcp_check(host: Host, port: int, address: str = LOOPBACK_ADDRESS) -> Check:
    """Whether ``port`` at ``address`` accepts a TCP connection, as ``host`` reaches it."""
    started = time.perf_counter()
    try:
        _, writer = await host.open_tcp(port, timeout=3, address=address)
    except (OSError, HostError) as exc:
        return Check("tcp", False, f"port {port} not accepting ({exc})")
    writer.close()
    return Check("tcp", True, f"port {port} accepting", time.perf_counter() - started)
