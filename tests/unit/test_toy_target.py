"""A third target, written in this file alone, brought up by the orchestrator unchanged: the target interface is
enough (pdtui/targets/__init__.py lists what a target implements).

The toy target runs each service as an in-memory "process" that prints a few lines and its ready line; one
stream per place carries every service's lines, as a host's journal tail does. The orchestrator is handed it as
the commands hand it targets/registry.py's ``Registry``: a :class:`~pdtui.engine.session.Targets` of two methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any

import pytest
import yaml

from pdtui.config import Deployment, ServiceConfig, parse_config
from pdtui.engine.events import Done, LogLines, ServiceInfo
from pdtui.engine.intent import Action
from pdtui.engine.log_entry import LogEntry
from pdtui.engine.orchestrator import Orchestrator
from pdtui.engine.preflight import Reacher
from pdtui.engine.readiness import LineJudge
from pdtui.engine.service_run import ServiceRun
from pdtui.engine.session import Session
from pdtui.engine.states import ServiceState as S
from pdtui.hosts.base import LOOPBACK_ADDRESS
from tests.engine_helpers import run_to_done

pytestmark = pytest.mark.looptime

READY = "toy is up and ready"


class ToyHost:
    """No machine at all: the toy target never runs a command."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def close(self) -> None:
        pass


class ToyLooks:
    last_took = 0.0     # a look at a toy place takes no time: its runs look on the common beat


class ToySession(Session):
    """One place of the toy target: its services' "processes" write to one stream the session follows."""

    looker = ToyLooks()

    def __init__(self, name: str) -> None:
        super().__init__(name, ToyHost(name), command_timeout=5.0)     # type: ignore[arg-type]
        self.lines: asyncio.Queue[tuple[str, LogEntry]] = asyncio.Queue()
        self.started: list[str] = []

    async def preflight(self, runs: Sequence[ServiceRun], reacher: Reacher, *, starting: bool) -> bool:
        found = await asyncio.gather(*(reacher.reach(self.look) for _ in runs))
        return all(found)

    async def look(self) -> bool:
        await asyncio.sleep(0.01)
        return True

    def follow(self, runs: Sequence[ServiceRun], on_problem: Callable[[str], None]) -> Coroutine[Any, Any, None]:
        by_name = {run.unit: run for run in runs}

        async def deliver() -> None:
            while True:
                name, entry = await self.lines.get()
                by_name[name].lines.take(entry)
        return deliver()

    def start(self, name: str, invocation: str, startup: float) -> None:
        """The service's "process": a line now, its ready line after ``startup`` seconds."""
        self.started.append(name)
        loop = asyncio.get_running_loop()
        self._write(name, invocation, "loading the toy model")
        loop.call_later(startup, self._write, name, invocation, READY)

    def _write(self, name: str, invocation: str, text: str) -> None:
        cursor = f"{name}:{self.lines.qsize()}:{asyncio.get_running_loop().time()}"
        self.lines.put_nowait((name, LogEntry(cursor, None, name, invocation, 6, text)))


class ToyRun(ServiceRun):
    """A service of the toy target: started, then judged and watched as every run is."""

    @property
    def toy(self) -> ToySession:
        assert isinstance(self.session, ToySession)
        return self.session

    @property
    def unit(self) -> str:
        return self.cfg.name

    @property
    def running(self) -> bool:
        return self.under_way and self.state not in (S.STOPPED, S.FAILED)

    def names_for(self, router: ServiceConfig) -> frozenset[str]:
        return frozenset({LOOPBACK_ADDRESS})

    def info(self, deployment: Deployment) -> ServiceInfo:
        cfg = self.cfg
        return ServiceInfo(cfg.name, cfg.role, cfg.name, cfg.host, (), None, cfg.port, tuple(cfg.after), cfg.timeout)

    async def bring_up(self, action: Action = Action.START) -> bool:
        self.attempt = self.fresh_attempt()
        self.attempt.invocation = f"{self.name}-{self.attempt.number}"
        self.transition(S.STARTING, "toy start")
        self.started_by_us = True
        self.toy.start(self.name, self.attempt.invocation, startup=30.0)
        self.transition(S.WAITING)
        await self.ready_wait.wait(self.attempt.started_at + self.cfg.timeout)
        if self.state is S.READY:
            await self.serving_watch.watch()
            return True
        return False

    async def stop(self, *, disable: bool = False, why: str = "") -> None:
        self.transition(S.STOPPING, "toy stop")
        self.transition(S.STOPPED, f"stopped: {why}" if why else "stopped")

    async def _check_unit(self) -> None:
        """A toy process never dies."""


def toy_deployment() -> Deployment:
    config = {"name": "toy", "hosts": {"t0": {"local": True}}, "services": {
        "a": {"host": "t0", "unit": "a", "timeout": "2m", "ready": {"log": READY}},
        "b": {"host": "t0", "unit": "b", "timeout": "2m", "ready": {"log": READY}, "after": ["a"]}}}
    return parse_config(yaml.safe_dump(config, sort_keys=False), "toy.yaml")


class ToyTargets:
    """The toy target as the orchestrator is handed every target (engine/session.py's ``Targets``)."""

    def __init__(self) -> None:
        self.sessions: dict[str, ToySession] = {}

    def new_run(self, cfg: ServiceConfig) -> ServiceRun:
        return ToyRun(cfg, LineJudge(cfg.ready.log, ()))

    def open_sessions(self, deployment: Deployment, places: Collection[str], on_status: Callable[..., None], *,
                      command_timeout: float, clock: Callable[[], float]) -> dict[str, Session]:
        self.sessions.update({name: ToySession(name) for name in places})
        return dict(self.sessions)


async def test_the_orchestrator_brings_up_a_target_it_has_never_heard_of():
    targets = ToyTargets()
    orchestrator = Orchestrator(toy_deployment(), targets, clock=asyncio.get_running_loop().time)
    done, rec = await run_to_done(orchestrator)
    assert isinstance(done, Done) and done.ok, done
    assert targets.sessions["t0"].started == ["a", "b"]
    assert rec.index("a", "ready") < rec.index("b", "starting"), "b comes after a"
    assert 60.0 <= done.elapsed < 62.0, "two toy start-ups of 30 s, one after the other, in the loop's time"
    lines = [r.text for e in rec.of(LogLines) if e.service == "b" for r in e.lines]
    assert lines == ["loading the toy model", READY]
