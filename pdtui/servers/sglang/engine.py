"""SGLang as a :class:`~pdtui.servers.ServingEngine`: its package's tables and modules, declared."""

from __future__ import annotations

from pdtui.servers import ArgumentsProbe
from pdtui.servers.declared import DeclaredEngine
from pdtui.servers.sglang import arguments, launch, metrics, pairing, pd_request, phases, server_info, signatures
from pdtui.servers.sglang.bootstrap_check import BootstrapAccepts

ENGINE = DeclaredEngine(
    "sglang", "SGLang", phases.TABLE, signatures.TABLE, launch, metrics, pairing, server_info, pd_request,
    ArgumentsProbe(launch.SERVER_MODULE, arguments.DISTRIBUTIONS, arguments.PROBE),
    kv_series_role="prefill",       # it sends, and counts what failed, its bootstrap's too
    router_puts_back=True,          # POST /workers (engine/router_workers.py)
    readiness_checks=(BootstrapAccepts(),),     # a PD prefill's bootstrap server accepting
    quiet_health="/ready")      # 503 while starting, after a failed warm-up, paused or shutting down
"""What :func:`pdtui.servers.serving_named` finds for ``engine: sglang``."""
