"""Running the orchestrator against a simulated deployment, and reading what it said."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import pytest
import yaml

from pdtui.config import parse_config
from pdtui.engine.events import Done, StateChanged
from pdtui.engine.intent import UP
from pdtui.engine.orchestrator import Orchestrator, Timing
from pdtui.hosts import make_host
from pdtui.sim import command_lines, demo
from pdtui.sim.command_lines import router_argv  # noqa: F401  (used by the tests)
from pdtui.targets.registry import Registry

FAST = Timing(poll=0.1, unit_poll=0.5, unit_watch=0.5, settle=0.2, log_batch=0.02)
# A sim service's timeout in a test that waits for it to get ready: a sim worker is ready in about a second, and a
# passing test ends then. A real vLLM server's NIXL progress thread polls UCX without pause (a core each: a pair
# takes both of this machine's), and the suite runs it beside the sim tests: other processes there have waited up
# to ~20 s for a CPU.
READY_WITHIN = "60s"


class Recorder:
    """Subscribes to an orchestrator and keeps every event."""

    def __init__(self) -> None:
        self.events: list = []

    def __call__(self, event) -> None:
        self.events.append(event)

    def states(self, service: str) -> list[str]:
        return [e.new.value for e in self.events if isinstance(e, StateChanged) and e.service == service]

    def change(self, service: str, state: str) -> StateChanged:
        """The first change of ``service`` to ``state``; when it never came, the failure says what came instead."""
        changes = [e for e in self.events if isinstance(e, StateChanged) and e.service == service]
        found = next((e for e in changes if e.new.value == state), None)
        assert found is not None, (f"{service} never became {state}; it went: "
                                   + "; ".join(f"{e.new.value} ({e.reason})" for e in changes))
        return found

    def index(self, service: str, state: str) -> int:
        return self.events.index(self.change(service, state))

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


def real_router_params() -> list:
    """One pytest param per real router package, skipped (with the reason shown) where it is not installed."""
    installed = command_lines.installed_routers()
    return [pytest.param(name, id=name, marks=pytest.mark.skipif(
                name not in installed, reason=f"the {name} package is not installed (pip install {name})"))
            for name in command_lines.REAL_ROUTERS]


@pytest.fixture(params=real_router_params())
def real_router(request) -> str:
    """The real router package a test runs against: each of smg and sglang-router in turn."""
    return request.param


def reference(sandbox, *, failures=None, startup=0.5, timeout="30s", generation=demo.DEFAULT_GENERATION, router=None,
              shape=demo.REFERENCE_SHAPE, nodes=1, engine="sglang"):
    """The demo's deployment of ``shape`` built in ``sandbox`` (ports the OS picks), its units installed (``nodes``:
    the decode spans that many machines, sandboxes beside ``sandbox``; ``engine`` vllm: vLLM's stand-ins behind
    vllm-router)."""
    options = demo.DemoOptions(failures or {}, startup, timeout, generation=generation, reference_ports=False,
                               shape=shape, nodes=nodes, engine=engine)
    return demo.build(sandbox, options if router is None else dataclasses.replace(options, router=router))


async def bring_up(deployment, *, smoke=True, timing=FAST, intent=UP) -> tuple[Done, Recorder, Orchestrator]:
    """Run the orchestrator with ``intent`` (a bring-up by default) to its Done, then close it."""
    orchestrator = Orchestrator(deployment, Registry(make_host), smoke=smoke, timing=timing, intent=intent)
    done, recorder = await run_to_done(orchestrator)
    return done, recorder, orchestrator


async def until_it_fails(deployment, service: str | Sequence[str], *, timeout: float = 20.0,
                         meanwhile: Callable[[Done], None] | None = None,
                         told: Callable[[Recorder], bool] = lambda _: True) -> Recorder:
    """A bring-up, then its watch until ``service`` (or each of several) has failed, the outcome was told again
    and ``told`` holds of what was told (``meanwhile``: what the test does to the deployment once the bring-up's
    outcome is in)."""
    services = [service] if isinstance(service, str) else list(service)
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=FAST)
    orchestrator.subscribe(recorder)
    try:
        done = await orchestrator.run()
        if meanwhile is not None:
            meanwhile(done)
        async with asyncio.timeout(timeout):
            while (any("failed" not in recorder.states(s) for s in services) or recorder.of(Done)[-1].ok
                   or not told(recorder)):
                await asyncio.sleep(0.05)
    finally:
        await orchestrator.close()
    return recorder


async def until_told(deployment, told: Callable[[Recorder], bool], *, timeout: float) -> Recorder:
    """A bring-up watched until ``told`` holds of what it told (or it ended), then left: what a user who saw enough
    does with Ctrl-C (the units stay as they are)."""
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=FAST)
    orchestrator.subscribe(recorder)
    running = asyncio.ensure_future(orchestrator.run())
    try:
        async with asyncio.timeout(timeout):
            while not told(recorder) and not running.done():
                await asyncio.sleep(0.05)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await orchestrator.close()
    return recorder


async def run_to_done(orchestrator: Orchestrator) -> tuple[Done, Recorder]:
    """Run ``orchestrator`` to its Done, every event recorded, then close it."""
    recorder = Recorder()
    orchestrator.subscribe(recorder)
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
    return done, recorder


def worker_argv(role: str, port: int, **options) -> list[str]:
    """A sim worker that gets ready fast, as tests want it."""
    options.setdefault("startup", 0.4)
    return command_lines.worker_argv(role, port, **options)


def pd_deployment(prefills: Mapping[str, Mapping[str, Any]], decodes: Mapping[str, Mapping[str, Any]], *,
                  router: Mapping[str, Any] | None = None, name: str = "pd", hosts: Mapping[str, Any] | None = None,
                  timeout: str | None = None, unit_prefix: str = "", **settings: Any):
    """A PD deployment: the prefills and decodes by name with their own keys, one ``router`` in front of them all.

    Each service's role is filled in; its host is the first of ``hosts`` (one host "gpu0" by default), its unit
    ``unit_prefix`` and its name, its timeout ``timeout``, unless its keys say otherwise. The router listens on
    8000 unless ``router`` says otherwise. ``settings``: the config's other top-level keys (``strict``...).
    """
    hosts = dict(hosts or {"gpu0": {"address": "gpu0.internal"}})
    first = next(iter(hosts))

    def service(name: str, role: str, keys: Mapping[str, Any]) -> dict[str, Any]:
        return {"host": first, "unit": f"{unit_prefix}{name}", "role": role,
                **({"timeout": timeout} if timeout is not None else {}), **keys}

    services = {**{n: service(n, "prefill", keys) for n, keys in prefills.items()},
                **{n: service(n, "decode", keys) for n, keys in decodes.items()},
                "router": service("router", "router", {"port": 8000, **(router or {})})}
    config = {"name": name, **settings, "hosts": hosts, "services": services}
    return parse_config(yaml.safe_dump(config, sort_keys=False), f"{name}.yaml")


def sim_deployment(sandbox, services: dict[str, tuple[list[str], dict]], name: str = "test", hosts=None):
    """A deployment on the sandbox: each service's unit runs the given argv.

    By default one local host "sim"; ``hosts`` replaces it (services name theirs in their fields).
    """
    hosts = hosts or {"sim": {"local": True, "commands": sandbox.commands, "sysfs": str(sandbox.sysfs)}}
    config = {"name": name, "hosts": hosts, "services": {}}
    for service, (argv, fields) in services.items():
        unit = sandbox.add_unit(f"t-{service}", argv)
        config["services"][service] = {"host": "sim", "unit": unit, **fields}
    return parse_config(yaml.safe_dump(config, sort_keys=False), f"{sandbox.root}/test.yaml")


class ScriptedLines:
    """A stream as a Host's ``stream`` yields it (the Lines protocol), playing given batches of raw lines, then
    ending with ``exit_status`` and ``stderr``."""

    def __init__(self, batches: list[list[bytes]], exit_status: int = 0, stderr: str = "") -> None:
        self._batches, self.exit_status, self.stderr = batches, exit_status, stderr

    async def _each(self) -> AsyncIterator[list[bytes]]:
        for batch in self._batches:
            yield batch

    def batches(self) -> AsyncIterator[list[bytes]]:
        return self._each()
