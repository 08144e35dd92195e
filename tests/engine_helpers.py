"""Running the orchestrator against a simulated deployment, and reading what it said."""

from __future__ import annotations

import sys

import yaml

from pdtui import demo
from pdtui.config import parse_config
from pdtui.sim.ports import free_port
from pdtui.engine.events import Done, StateChanged
from pdtui.engine.orchestrator import Orchestrator, Timing
from pdtui.hosts import make_host

FAST = Timing(poll=0.1, unit_poll=0.5, settle=0.2, log_batch=0.02)


class Recorder:
    """Subscribes to an orchestrator and keeps every event."""

    def __init__(self) -> None:
        self.events: list = []

    def __call__(self, event) -> None:
        self.events.append(event)

    def states(self, service: str) -> list[str]:
        return [e.new.value for e in self.events if isinstance(e, StateChanged) and e.service == service]

    def change(self, service: str, state: str) -> StateChanged:
        return next(e for e in self.events
                    if isinstance(e, StateChanged) and e.service == service and e.new.value == state)

    def index(self, service: str, state: str) -> int:
        return self.events.index(self.change(service, state))

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


def reference(sandbox, *, failures=None, startup=0.5, timeout="30s"):
    return demo.build(sandbox, demo.DemoOptions(failures or {}, startup, timeout))


async def bring_up(deployment, *, smoke=True, timing=FAST) -> tuple[Done, Recorder, Orchestrator]:
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, make_host, smoke=smoke, timing=timing)
    orchestrator.subscribe(recorder)
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
    return done, recorder, orchestrator


def worker_argv(role: str, port: int, *, bootstrap: int, startup: float = 0.4, fail: str | None = None) -> list[str]:
    argv = [sys.executable, "-m", "pdtui.sim.worker", "--role", role, "--port", str(port),
            "--bootstrap-port", str(bootstrap), "--startup", str(startup)]
    return argv + (["--fail", fail] if fail else [])


def router_argv(port: int, prefill: list[tuple[int, int]], decode: list[int]) -> list[str]:
    """The real sglang-router in PD mode in front of the given worker ports."""
    argv = [sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
            "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    for worker_port, bootstrap in prefill:
        argv += ["--prefill", f"http://127.0.0.1:{worker_port}", str(bootstrap)]
    for worker_port in decode:
        argv += ["--decode", f"http://127.0.0.1:{worker_port}"]
    return argv


def sim_deployment(sandbox, services: dict[str, tuple[list[str], dict]], name: str = "test", hosts=None):
    """A deployment on the sandbox: each service's unit runs the given argv.

    By default one local host "sim"; ``hosts`` replaces it (services name theirs in their fields).
    """
    hosts = hosts or {"sim": {"local": True, "commands": sandbox.commands}}
    config = {"name": name, "hosts": hosts, "services": {}}
    for service, (argv, fields) in services.items():
        unit = sandbox.add_unit(f"t-{service}", argv)
        config["services"][service] = {"host": "sim", "unit": unit, **fields}
    return parse_config(yaml.safe_dump(config, sort_keys=False), f"{sandbox.root}/test.yaml")
