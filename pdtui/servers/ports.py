"""Ports pdtui chooses for what the config does not number: each router's metrics exporter, each vLLM server's NIXL
side channel. Every engine's choices are made here at once, so two engines' servers on one host never pick the
same port. Pure: the ports depend on the config alone (a unit and the preflight agree without asking each other).
"""

from __future__ import annotations

from collections.abc import Mapping

from pdtui.config import Deployment, ServiceConfig

ROUTER_METRICS_FROM = 29000        # the routers' own default exporter port: a second router on a host would panic
SIDE_CHANNEL_FROM = 5600           # vLLM's NIXL side channel's default (VLLM_NIXL_SIDE_CHANNEL_PORT)
SIDE_CHANNEL_ENV = "VLLM_NIXL_SIDE_CHANNEL_PORT"


def given_side_channel(svc: ServiceConfig) -> int | None:
    """The side-channel port a vLLM server's launch sets itself, if it does."""
    value = svc.launch.env.get(SIDE_CHANNEL_ENV) if svc.launch is not None else None
    return int(value) if value is not None and value.isdigit() else None


def _taken(deployment: Deployment) -> dict[str, set[int]]:
    """Each host's ports the config numbers: services', bootstrap servers', the exporters and side channels given."""
    taken: dict[str, set[int]] = {}
    for svc in deployment.services.values():
        ports = {p for p in (svc.port, svc.bootstrap_port) if p is not None}
        if svc.launch is not None and svc.launch.prometheus_port is not None:
            ports.add(svc.launch.prometheus_port)
        if (side := given_side_channel(svc)) is not None:
            ports.add(side)
        taken.setdefault(svc.host, set()).update(ports)
    return taken


def _assign(deployment: Deployment, wanted: Mapping[str, int | None], start: int,
            taken: dict[str, set[int]]) -> dict[str, int]:
    """Each service its given port, else the first from ``start`` up that nothing else on its host uses."""
    chosen: dict[str, int] = {}
    for name, given in wanted.items():
        host = deployment.services[name].host
        port = given
        if port is None:
            port = start
            while port in taken[host]:
                port += 1
            taken[host].add(port)
        chosen[name] = port
    return chosen


def chosen_ports(deployment: Deployment) -> tuple[dict[str, int], dict[str, int]]:
    """Every router's metrics port and every vLLM NIXL server's side-channel port, by service."""
    taken = _taken(deployment)
    routers = {name: svc.launch.prometheus_port for name, svc in deployment.services.items()
               if svc.is_router and svc.launch is not None}
    metrics = _assign(deployment, routers, ROUTER_METRICS_FROM, taken)
    sides = {name: given_side_channel(svc) for name, svc in deployment.services.items()
             if svc.engine == "vllm" and svc.role in ("prefill", "decode") and svc.launch is not None}
    return metrics, _assign(deployment, sides, SIDE_CHANNEL_FROM, taken)


def metrics_ports(deployment: Deployment, engine: str) -> dict[str, int]:
    """The metrics port of each router of ``engine`` whose unit pdtui makes."""
    return {name: port for name, port in chosen_ports(deployment)[0].items()
            if deployment.services[name].engine == engine}


def side_channel_port(deployment: Deployment, svc: ServiceConfig) -> int:
    """The NIXL side-channel port of a vLLM server: its launch's, else one of its own on its host."""
    given = given_side_channel(svc)
    return given if given is not None else chosen_ports(deployment)[1].get(svc.name, SIDE_CHANNEL_FROM)
