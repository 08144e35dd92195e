"""The command lines of the simulated deployment's programs, in one place.

The demo, the tests and the benchmarks all build their units from these, so a
flag the real programs need (the router's metrics port, say) is added once.
"""

from __future__ import annotations

import importlib.util
import sys

from pdtui.sim.ports import free_port


def sim_python(module: str) -> list[str]:
    """argv running a sim program (stdlib and pdtui only) without ``site``.

    ``-S`` skips site-packages and every ``.pth`` file in it (one that imports
    certifi costs ~30 ms per start): the sim's systemctl and journalctl run once
    per command pdtui sends, and a deployment starts a supervisor per unit.
    pdtui is found through PYTHONPATH, which the sim sets for everything it
    starts (:func:`pdtui.sim.systemctl.package_env`).
    """
    return [sys.executable, "-S", "-m", module]


def real_router_available() -> bool:
    return importlib.util.find_spec("sglang_router") is not None


def worker_argv(role: str, port: int, *, bootstrap: int, startup: float = 3.0, gpus: str | None = None,
                fail: str | None = None, log_rate: float | None = None, generation: str | None = None) -> list[str]:
    """An SGLang-like sim worker (``python -m pdtui.sim.worker``).

    ``bootstrap``: the prefill's bootstrap server port (it binds it), the one decode looks for.
    """
    argv = [*sim_python("pdtui.sim.worker"), "--disaggregation-mode", role, "--port", str(port),
            "--disaggregation-bootstrap-port", str(bootstrap), "--startup", f"{startup:g}"]
    if gpus:
        argv += ["--gpus", gpus]
    if generation:
        argv += ["--generation", generation]
    if log_rate is not None:
        argv += ["--log-rate", f"{log_rate:g}"]
    return argv + (["--fail", fail] if fail else [])


def router_argv(port: int, prefill: list[tuple[int, int]], decode: list[int], *, real: bool | None = None,
                metrics_port: int | None = None) -> list[str]:
    """The PD router in front of the given worker ports on 127.0.0.1.

    ``real``: the real ``sglang-router`` (default: when it is installed), else
    pdtui's small stand-in, which takes the same flags. The real router also
    serves Prometheus metrics (on 29000 by default) and dies if that port is
    taken, so it always gets a port of its own.
    """
    use_real = real_router_available() if real is None else real
    program = [sys.executable, "-m", "sglang_router.launch_router"] if use_real else sim_python("pdtui.sim.router")
    argv = [*program, "--pd-disaggregation", "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port or free_port())]
    for worker_port, bootstrap in prefill:
        argv += ["--prefill", f"http://127.0.0.1:{worker_port}", str(bootstrap)]
    for worker_port in decode:
        argv += ["--decode", f"http://127.0.0.1:{worker_port}"]
    return argv
