"""What a run of the engine is asked to do: bring up, watch, restart or take down.

One :class:`Intent` per command line (``up``, ``status``, ``restart``,
``down``); the orchestrator turns it into an :class:`Action` per service. The
TUI's restart and stop of one service reuse the same actions at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Verb(str, Enum):
    UP = "up"              # start what is not running (attach to what is), then the router
    STATUS = "status"      # look and judge only: nothing is started, stopped or enabled
    RESTART = "restart"    # restart the services asked for; what comes after them is proven again
    DOWN = "down"          # stop everything, what comes after first


class RestartHow(str, Enum):
    """How a face's restart of one backend under serving routers goes (the TUI's ``R`` offers each)."""

    DRAIN = "drain"        # taken out of its routers, restarted, proven, put back: the routers serve throughout
    ROLLING = "rolling"    # every service of its role in turn, this one first, each drained
    NOW = "now"            # restarted at once: what comes after it waits for it and is proven again


class Action(str, Enum):
    """What a service's run does with its unit when its turn comes."""

    START = "start"        # start it; a unit already running is attached to instead
    RESTART = "restart"    # start it afresh (``systemctl restart``)
    ATTACH = "attach"      # never command it: judge the invocation that runs


@dataclass(frozen=True, slots=True)
class Intent:
    verb: Verb = Verb.UP
    services: tuple[str, ...] = ()   # restart, down: the services asked for (down: none is all of them)
    with_dependents: bool = False    # restart: also restart what comes after them
    fresh: bool = False              # up --restart: restart units that are running already
    disable: bool = False            # down --disable: also disable the units
    drain: bool = True               # restart: a backend under serving routers is taken out of them first
    drain_timeout: float = 120.0     # seconds a drained backend may take to finish its requests
    rolling: bool = False            # restart: one at a time, each back (proven, in its routers) before the next
    force: bool = False              # up, restart: start despite the preflight's refusals of servers as they will run

    @property
    def watching(self) -> bool:
        """Whether this run only looks (the title says so)."""
        return self.verb is Verb.STATUS

    @property
    def title(self) -> str:
        """What the screen's title says this run does."""
        if self.verb is Verb.RESTART:
            return f"{'rolling restart of' if self.rolling else 'restarting'} {', '.join(self.services)}"
        if self.verb is Verb.DOWN and self.services:
            return f"stopping {', '.join(self.services)}"
        return {Verb.UP: "bringing up", Verb.STATUS: "watching", Verb.DOWN: "taking down"}[self.verb]


UP = Intent()
