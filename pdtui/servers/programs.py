"""What every engine's ``launch:`` command shares: which program runs it, and where its server listens."""

from __future__ import annotations

from pdtui.config import Deployment, ServiceConfig
from pdtui.config.defaults import DEFAULT_PYTHON
from pdtui.config.launch import LaunchSpec


def program(launch: LaunchSpec, module: str) -> list[str]:
    """The launch's own command, else its Python (the system's by default) running ``module``."""
    if launch.command is not None:
        return list(launch.command)
    return [launch.python or DEFAULT_PYTHON, "-m", module]


def listen_host(deployment: Deployment, svc: ServiceConfig) -> str:
    """Where a backend listens: its launch's ``host``, else every address when a router on another host
    comes after it (or a scheduler places it: its router may land on another node), else loopback."""
    if svc.launch is not None and svc.launch.host:
        return svc.launch.host
    remote = svc.scheduled or any(router.host != svc.host for router in deployment.routers_of(svc.server))
    return "0.0.0.0" if remote else "127.0.0.1"
