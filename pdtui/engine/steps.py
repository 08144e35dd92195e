"""The plan strip's steps, derived from the services' states (never tracked on their own).

Backends are the services that come after nothing; routers, the ones that come
after something. "start" is done once every one of them was started; "wait"
(or "probe", for routers) once every one is ready, and failed as soon as one
failed or timed out. Services that were blocked make their steps skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    """Each step's status, derived from the services' states."""
    backends = [r for r in runs if not r.cfg.after]
    routers = [r for r in runs if r.cfg.after]
    statuses = {Step.PREFLIGHT: preflight,
                Step.START_BACKENDS: _start_status(backends), Step.WAIT_READY: _wait_status(backends),
                Step.START_ROUTER: _start_status(routers), Step.PROBE_ROUTER: _wait_status(routers)}
    states = [r.state for r in runs]
    if all(s is S.READY for s in states):
        statuses[Step.DONE] = StepStatus.DONE
    elif any(s in (S.FAILED, S.TIMED_OUT) for s in states):
        statuses[Step.DONE] = StepStatus.FAILED
    else:
        statuses[Step.DONE] = StepStatus.PENDING
    return statuses


def _start_status(runs: Sequence[ServiceProgress]) -> StepStatus:
    states = {r.state for r in runs}
    if not runs or states == {S.BLOCKED}:
        return StepStatus.SKIPPED
    if S.STARTING in states:
        return StepStatus.RUNNING
    if any(r.state is S.FAILED and not r.started_by_us for r in runs):
        return StepStatus.FAILED
    if all(r.started_by_us or r.state is S.BLOCKED for r in runs):
        return StepStatus.DONE
    return StepStatus.RUNNING if any(r.started_by_us for r in runs) else StepStatus.PENDING


def _wait_status(runs: Sequence[ServiceProgress]) -> StepStatus:
    states = {r.state for r in runs}
    if not runs or states == {S.BLOCKED}:
        return StepStatus.SKIPPED
    if states & {S.FAILED, S.TIMED_OUT}:
        return StepStatus.FAILED
    if states == {S.READY}:
        return StepStatus.DONE
    return StepStatus.RUNNING if S.WAITING in states or S.READY in states else StepStatus.PENDING
