"""A third target, written in this file alone, brought up by the orchestrator unchanged: the target interface is
enough (pdtui/targets/__init__.py lists what a target implements).

The toy target runs each service as an in-memory "process" that prints a few lines and its ready line; one
stream per place carries every service's lines, as a host's journal tail does. The orchestrator is handed it as
the commands hand it targets/registry.py's ``Registry``: a :class:`~pdtui.engine.session.Targets` of two methods.

Its settings of the config are its own too: a section ``toys:`` of toy places (how long their processes take to
start) and a service's ``toy:`` (its place) and ``chatter:`` (what its process says before it is ready), declared
here as a :class:`~pdtui.config.PlacementKind` and handed to the config's loader as the target is handed to the
orchestrator; the config's core never heard of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Annotated, Any, ClassVar

import pytest
import yaml

from pdtui.config import ConfigError, Deployment, PlacementKind, Placements, ServiceConfig, parse_config
from pdtui.config.fields import Duration, HostName, listed, printable
from pdtui.config.json_schema import config_schema
from pdtui.config.placement import registered
from pdtui.config.places import Place
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


class ToyPlace(Place):
    """A toy place: its "processes" are ready ``startup`` seconds after they start."""

    KIND: ClassVar[str] = "toy"
    EXPECTED: ClassVar[str] = "a mapping of toy settings (startup)"

    startup: Duration = 30.0


class ToyService(ServiceConfig):
    """A service as a toy "process" on a toy place."""

    toy: HostName | None = None     # its place
    chatter: Annotated[tuple[str, ...], listed(printable("a line"), "a list of lines")] = ()   # said before ready


TOYS: Placements = registered().with_kind(
    PlacementKind("toys", ToyPlace, ToyService, ("toy",), "a toy on a toy place", needed_for="for toys"))


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

    def __init__(self, place: ToyPlace) -> None:
        super().__init__(place.name, ToyHost(place.name), command_timeout=5.0)     # type: ignore[arg-type]
        self.startup = place.startup
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

    def start(self, name: str, invocation: str, chatter: Sequence[str]) -> None:
        """The service's "process": its chatter now, its ready line after the place's start-up."""
        self.started.append(name)
        loop = asyncio.get_running_loop()
        for text in chatter:
            self._write(name, invocation, text)
        loop.call_later(self.startup, self._write, name, invocation, READY)

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
        self.toy.start(self.name, self.attempt.invocation, self.cfg.settings(ToyService).chatter)
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


CHATTER = ["loading the toy model"]


def toy_config(**changes: Any) -> dict[str, Any]:
    config = {"name": "toy", "toys": {"t0": {"startup": "30s"}}, "services": {
        "a": {"toy": "t0", "chatter": CHATTER, "timeout": "2m", "ready": {"log": READY}},
        "b": {"toy": "t0", "chatter": CHATTER, "timeout": "2m", "ready": {"log": READY}, "after": ["a"]}}}
    return {**config, **changes}


def toy_deployment(config: dict[str, Any] | None = None, placements: Placements = TOYS) -> Deployment:
    return parse_config(yaml.safe_dump(config or toy_config(), sort_keys=False), "toy.yaml", placements)


def toy_error(config: dict[str, Any], placements: Placements = TOYS) -> str:
    with pytest.raises(ConfigError) as caught:
        toy_deployment(config, placements)
    return str(caught.value)


class ToyTargets:
    """The toy target as the orchestrator is handed every target (engine/session.py's ``Targets``)."""

    def __init__(self) -> None:
        self.sessions: dict[str, ToySession] = {}

    def new_run(self, cfg: ServiceConfig) -> ServiceRun:
        return ToyRun(cfg, LineJudge(cfg.ready.log, ()))

    def open_sessions(self, deployment: Deployment, places: Collection[str], on_status: Callable[..., None], *,
                      command_timeout: float, clock: Callable[[], float]) -> dict[str, Session]:
        toys = deployment.places(ToyPlace)
        self.sessions.update({name: ToySession(toys[name]) for name in places})
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


def test_the_toy_target_declares_its_settings_and_the_config_reads_them():
    deployment = toy_deployment()
    a = deployment.services["a"]
    assert (a.host, a.settings(ToyService).toy, a.settings(ToyService).chatter) == ("t0", "t0", tuple(CHATTER))
    assert deployment.places(ToyPlace)["t0"].startup == 30.0 and a.placement.section == "toys"
    schema = config_schema(TOYS)
    assert "toys" in schema["properties"] and {"toy", "chatter"} <= set(schema["$defs"]["ServiceConfig"]["properties"])


def test_a_config_without_the_toy_target_has_never_heard_of_its_settings():
    config = toy_config(hosts={"h": {"local": True}})
    assert toy_error(config, registered()) == "toy.yaml:2:1: unknown key 'toys' in the top level"


@pytest.mark.parametrize(("change", "said"), [
    ({"toys": {"t0": {"startp": "30s"}}}, "toy.yaml:4:5: unknown key 'startp' in toy 't0' (did you mean 'startup'?)"),
    ({"toys": {"t0": {"startup": "soon"}}},
     "toy.yaml:4:14: expected a duration like 90s, 6m, 1h or a number of seconds, got 'soon'"),
    ({"toys": {"t0": []}}, "toy.yaml:3:7: expected a mapping of toy settings (startup), got an empty list"),
    ({"services": {"a": {"toy": "t9", "timeout": "2m"}}}, "toy.yaml:7:10: unknown toy 't9', expected one of t0"),
    ({"services": {"a": {"toy": "t0", "chatter": "hi"}}}, "toy.yaml:8:14: expected a list of lines, got 'hi'"),
    ({"services": {"a": {"toy": "t0", "host": "t0"}}},
     "toy.yaml:7:5: service 'a' has a host and a toy, expected one of them (a unit on a host, or a toy on a toy place)"),
    ({"services": {"a": {"toy": "t0", "unit": "a"}}}, "toy.yaml:8:5: service 'a' is on toy 't0': unit is a setting of a "
                                                      "service on a host"),
], ids=["unknown-key", "bad-startup", "not-a-mapping", "unknown-place", "bad-chatter", "two-kinds", "a-units-key"])
def test_the_toy_targets_settings_are_checked_in_the_configs_words(change, said):
    assert toy_error(toy_config(**change)) == said
