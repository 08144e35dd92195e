"""The plan strip's steps, derived from the services' states (never tracked on their own).

Backends are the services that come after nothing; routers, the ones that come
after something. "start" is done once every one of them was started; "wait"
(or "probe", for routers) once every one is ready, and failed as soon as one
failed or timed out. Services that were blocked make their steps skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, is_
from typing import Protocol

from pdtui.engine.events import Step, StepStatus
from pdtui.engine.states import ServiceState

S = ServiceState


class _Config(Protocol):
    @property
    def after(self) -> tuple[str, ...]: ...


class ServiceProgress(Protocol):
    """What the steps need to know of a service (read-only)."""

    @property
    def state(self) -> ServiceState: ...

    @property
    def started_by_us(self) -> bool: ...

    @property
    def cfg(self) -> _Config: ...


def step_statuses(preflight: StepStatus, runs: Sequence[ServiceProgress]) -> dict[Step, StepStatus]:
    """Each step's status, derived from the services' states.

    The orchestrator asks after every state change of any service, with all of
    them: a fleet of a thousand services asks thousands of times. So the split
    into backends and routers is kept between asks (:class:`_Split`), and each
    group's states are gathered in one C-level pass; only a rare case walks a
    group in Python.
    """
    backends, routers = _SPLIT.of(runs)
    b_states, r_states = set(map(_STATE, backends)), set(map(_STATE, routers))
    statuses = {Step.PREFLIGHT: preflight,
                Step.START_BACKENDS: _start_status(backends, b_states), Step.WAIT_READY: _wait_status(b_states),
                Step.START_ROUTER: _start_status(routers, r_states), Step.PROBE_ROUTER: _wait_status(r_states)}
    states = b_states | r_states
    if states <= {S.READY}:
        statuses[Step.DONE] = StepStatus.DONE
    elif states & {S.FAILED, S.TIMED_OUT}:
        statuses[Step.DONE] = StepStatus.FAILED
    else:
        statuses[Step.DONE] = StepStatus.PENDING
    return statuses


_STATE, _STARTED = attrgetter("state"), attrgetter("started_by_us")


class _Split:
    """The services last asked about, split into backends (after nothing) and routers.

    A service never changes group, and the orchestrator asks about the same
    services every time: checking that they are the same objects costs a
    fraction of looking at each one's config again.
    """

    def __init__(self) -> None:
        self._runs: list[ServiceProgress] = []
        self._groups: tuple[list[ServiceProgress], list[ServiceProgress]] = ([], [])

    def of(self, runs: Sequence[ServiceProgress]) -> tuple[list[ServiceProgress], list[ServiceProgress]]:
        if len(runs) != len(self._runs) or not all(map(is_, runs, self._runs)):
            self._runs = list(runs)
            self._groups = ([r for r in runs if not r.cfg.after], [r for r in runs if r.cfg.after])
        return self._groups


_SPLIT = _Split()


def _start_status(runs: Sequence[ServiceProgress], states: set[ServiceState]) -> StepStatus:
    if not runs or states == {S.BLOCKED}:
        return StepStatus.SKIPPED
    if S.STARTING in states:
        return StepStatus.RUNNING
    if S.FAILED in states and any(r.state is S.FAILED and not r.started_by_us for r in runs):
        return StepStatus.FAILED
    started = set(map(_STARTED, runs))
    if False not in started or all(r.started_by_us or r.state is S.BLOCKED for r in runs):
        return StepStatus.DONE
    return StepStatus.RUNNING if True in started else StepStatus.PENDING


def _wait_status(states: set[ServiceState]) -> StepStatus:
    if not states or states == {S.BLOCKED}:
        return StepStatus.SKIPPED
    if states & {S.FAILED, S.TIMED_OUT}:
        return StepStatus.FAILED
    if states == {S.READY}:
        return StepStatus.DONE
    return StepStatus.RUNNING if S.WAITING in states or S.READY in states else StepStatus.PENDING
