"""vLLM as a :class:`~pdtui.servers.ServingEngine`: its package's tables and modules, declared."""

from __future__ import annotations

from pdtui.servers import ArgumentsProbe
from pdtui.servers.declared import DeclaredEngine
from pdtui.servers.vllm import arguments, launch, metrics, pairing, pd_request, phases, server_info, signatures

# No readiness check of its own: it has no bootstrap server, its decodes reach a prefill's side channel per request.
ENGINE = DeclaredEngine(
    "vllm", "vLLM", phases.TABLE, signatures.TABLE, launch, metrics, pairing, server_info, pd_request,
    ArgumentsProbe(launch.SERVER_MODULE, arguments.DISTRIBUTIONS, arguments.PROBE, arguments.ENV_PREFIX),
    kv_series_role="decode",        # NIXL's default pull: the decode reads the KV, and counts it
    # vllm-router 0.1.17 in PD mode takes a worker out (DELETE /workers/{url}) but refuses one back (POST /workers:
    # 400 "PD router requires specific add_prefill_server or add_decode_server methods").
    router_puts_back=False)
"""What :func:`pdtui.servers.serving_named` finds for ``engine: vllm``."""
