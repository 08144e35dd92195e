"""The plan strip's steps, derived from the services' states, and told as they happened (:class:`StepRecord`).

Backends are the services that are not routers (``ServiceConfig.is_router``);
"start" is done once every one of a group was started (or found running); "wait" (or "probe",
for routers) once every one is ready, and failed as soon as one failed or timed
out. Services that were blocked make their steps skipped, as does a preflight
that refused the command before anything started. A step once done stays done
when a service of it fails later: that failure comes after the step, and the
outcome tells it (when the deployment was ready, when it failed since).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Protocol, TypeVar

from pdtui.engine.events import Step, StepChanged, StepStatus
from pdtui.engine.states import ServiceState

S = ServiceState


class _Config(Protocol):
    @property
    def is_router(self) -> bool: ...


class ServiceProgress(Protocol):
    """What the steps need to know of a service (read-only)."""

    @property
    def state(self) -> ServiceState: ...

    @property
    def under_way(self) -> bool: ...

    @property
    def cfg(self) -> _Config: ...


P = TypeVar("P", bound=ServiceProgress)


def split(runs: Sequence[P]) -> tuple[list[P], list[P]]:
    """The backends and the routers: a service never changes group, so its caller splits once."""
    return [r for r in runs if not r.cfg.is_router], [r for r in runs if r.cfg.is_router]


def step_statuses(preflight: StepStatus, backends: Sequence[ServiceProgress],
                  routers: Sequence[ServiceProgress]) -> dict[Step, StepStatus]:
    """Each step's status, derived from the services' states.

    The orchestrator asks after every state change of any service: a fleet of a
    thousand services asks thousands of times, so each group's states are
    gathered in one C-level pass and only a rare case walks a group in Python.
    """
    b_states, r_states = _proven(set(map(_STATE, backends))), _proven(set(map(_STATE, routers)))
    if preflight is StepStatus.FAILED and not any(map(_STARTED, backends)) and not any(map(_STARTED, routers)):
        # refused before anything started: the steps after it were never taken, none of them failed
        statuses = dict.fromkeys(AFTER_THE_PREFLIGHT, StepStatus.SKIPPED)
    else:
        statuses = {Step.START_BACKENDS: _start_status(backends, b_states), Step.WAIT_READY: _wait_status(b_states),
                    Step.START_ROUTER: _start_status(routers, r_states), Step.PROBE_ROUTER: _wait_status(r_states)}
    statuses = {Step.PREFLIGHT: preflight, **statuses}
    states = b_states | r_states
    if states <= {S.READY}:
        statuses[Step.DONE] = StepStatus.DONE
    elif states & {S.FAILED, S.TIMED_OUT}:
        statuses[Step.DONE] = StepStatus.FAILED
    else:
        statuses[Step.DONE] = StepStatus.PENDING
    return statuses


_STATE, _STARTED = attrgetter("state"), attrgetter("under_way")
AFTER_THE_PREFLIGHT = (Step.START_BACKENDS, Step.WAIT_READY, Step.START_ROUTER, Step.PROBE_ROUTER)


def _proven(states: set[ServiceState]) -> set[ServiceState]:
    """A degraded router was ready: for the bring-up's steps it counts as such (its badge tells the rest)."""
    if S.DEGRADED in states:
        states.discard(S.DEGRADED)
        states.add(S.READY)
    return states


def _start_status(runs: Sequence[ServiceProgress], states: set[ServiceState]) -> StepStatus:
    if not runs or states == {S.BLOCKED}:
        return StepStatus.SKIPPED
    if S.STARTING in states or S.QUEUED in states:     # a queued job has its place yet to come
        return StepStatus.RUNNING
    if S.FAILED in states and any(r.state is S.FAILED and not r.under_way for r in runs):
        return StepStatus.FAILED
    started = set(map(_STARTED, runs))
    if False not in started or all(r.under_way or r.state is S.BLOCKED for r in runs):
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


class StepRecord:
    """The steps as told so far, and when the deployment was last ready and when it failed since.

    A step told done stays done when it would now fail: every service of it had
    been started (or ready) by then, so one failing later fails in the life
    after that step, as its state and the outcome tell (``ready_at``,
    ``failed_at``); telling the step failed would rewrite what happened. A step
    that goes back to running or pending is a new attempt (a retry, a restart)
    and is told so: the deployment's readiness is then still to come.
    """

    def __init__(self) -> None:
        self.told: dict[Step, StepStatus] = {}
        self.ready_at: float | None = None     # elapsed when the ready step was told done (None: not since)
        self.failed_at: float | None = None    # elapsed when a service failed after that (None: none has)

    def update(self, now: dict[Step, StepStatus], elapsed: float) -> list[StepChanged]:
        """The changes to tell, ``now`` being each step's status as the services are (:func:`step_statuses`)."""
        changes = []
        for step, status in now.items():
            told = self.told.get(step)
            if told is status or (told is StepStatus.DONE and status is StepStatus.FAILED):
                continue
            self.told[step] = status
            changes.append(StepChanged(step, status, "", elapsed))
        self._readiness(now.get(Step.DONE), elapsed)
        return changes

    def _readiness(self, now: StepStatus | None, elapsed: float) -> None:
        """When the deployment became ready, and when it failed after that (its ready step kept done)."""
        if self.told.get(Step.DONE) is not StepStatus.DONE:
            self.ready_at = self.failed_at = None
            return
        if self.ready_at is None:
            self.ready_at = elapsed
        if now is StepStatus.FAILED and self.failed_at is None:
            self.failed_at = elapsed
