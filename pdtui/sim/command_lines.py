"""The command lines of the simulated deployment's programs, in one place.

The demo, the tests and the benchmarks all build their units from these, so a
flag the real programs need (the router's metrics port, say) is added once.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

from pdtui.config.launch import ROUTER_PYTHON_PACKAGES
from pdtui.sim.ports import free_port
from pdtui.sim.python import sim_python

__all__ = ["REAL_ROUTERS", "ROUTERS", "SIM_ROUTER", "default_router", "installed_routers", "router_argv",
           "router_label", "sim_python", "worker_argv"]


# The real PD routers, pip package -> Python package, in order of preference: smg (the Shepherd Model
# Gateway) is sglang-router's maintained successor, with the same launcher and PD flags; sglang-router
# (last release 0.3.2) is still what many deployments run.
REAL_ROUTERS = {name: ROUTER_PYTHON_PACKAGES[name] for name in ("smg", "sglang-router")}
SIM_ROUTER = "sim"
ROUTERS = (*REAL_ROUTERS, SIM_ROUTER)


def installed_routers() -> list[str]:
    """The real router packages this Python can run, preferred first."""
    return [name for name, module in REAL_ROUTERS.items() if importlib.util.find_spec(module) is not None]


def default_router() -> str:
    """The preferred installed router, else pdtui's stand-in, so the sim runs with or without one."""
    return next(iter(installed_routers()), SIM_ROUTER)


def router_label(package: str) -> str:
    """The router as the user should hear of it: ``smg 1.13.0``, or the stand-in."""
    import importlib.metadata  # 20-30 ms to import: only when asked
    if package == SIM_ROUTER:
        return "pdtui's simulated router"
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return package


def worker_argv(role: str, port: int, *, bootstrap: int, startup: float = 3.0, gpus: str | None = None,
                fail: str | None = None, log_rate: float | None = None, generation: str | None = None,
                extra: Sequence[str] = ()) -> list[str]:
    """An SGLang-like sim worker (``python -m pdtui.sim.worker``).

    ``bootstrap``: the prefill's bootstrap server port (it binds it), the one decode looks for. With
    ``--enable-metrics`` in ``extra`` it runs with site-packages: its ``/metrics`` is prometheus_client's.
    """
    python = ([sys.executable, "-m", "pdtui.sim.worker"] if "--enable-metrics" in extra
              else sim_python("pdtui.sim.worker"))
    argv = [*python, "--disaggregation-mode", role, "--port", str(port),
            "--disaggregation-bootstrap-port", str(bootstrap), "--startup", f"{startup:g}"]
    if gpus:
        argv += ["--gpus", gpus]
    if generation:
        argv += ["--generation", generation]
    if log_rate is not None:
        argv += ["--log-rate", f"{log_rate:g}"]
    return argv + (["--fail", fail] if fail else []) + list(extra)


def router_argv(port: int, prefill: list[tuple[int, int]], decode: list[int], *, package: str | None = None,
                metrics_port: int | None = None) -> list[str]:
    """The PD router in front of the given worker ports on 127.0.0.1.

    ``package``: one of :data:`ROUTERS` (default: :func:`default_router`); all
    three take the same flags. A real router also serves Prometheus metrics
    (on 29000 by default) and dies if that port is taken, so it always gets a
    port of its own.
    """
    package = package or default_router()
    if package not in ROUTERS:
        raise ValueError(f"unknown router {package!r}; one of {', '.join(ROUTERS)}")
    program = (sim_python("pdtui.sim.router") if package == SIM_ROUTER
               else [sys.executable, "-m", f"{REAL_ROUTERS[package]}.launch_router"])
    argv = [*program, "--pd-disaggregation", "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port or free_port())]
    for worker_port, bootstrap in prefill:
        argv += ["--prefill", f"http://127.0.0.1:{worker_port}", str(bootstrap)]
    for worker_port in decode:
        argv += ["--decode", f"http://127.0.0.1:{worker_port}"]
    return argv
