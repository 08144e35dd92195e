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
    """Each step's status, derived from the services' states.

    One pass over the services gathers the (router?, state, started) combinations
    present; every step is read off those few. The orchestrator asks after every
    state change of any service, so a pass per step would cost a fleet of a
    thousand services seconds over its bring-up.
    """
    seen = {(bool(r.cfg.after), r.state, r.started_by_us) for r in runs}
    backends = {(state, started) for router, state, started in seen if not router}
    routers = {(state, started) for router, state, started in seen if router}
    statuses = {Step.PREFLIGHT: preflight,
                Step.START_BACKENDS: _start_status(backends), Step.WAIT_READY: _wait_status(backends),
                Step.START_ROUTER: _start_status(routers), Step.PROBE_ROUTER: _wait_status(routers)}
    states = {state for _, state, _ in seen}
    if states <= {S.READY}:
        statuses[Step.DONE] = StepStatus.DONE
    elif states & {S.FAILED, S.TIMED_OUT}:
        statuses[Step.DONE] = StepStatus.FAILED
    else:
        statuses[Step.DONE] = StepStatus.PENDING
    return statuses


Seen = set[tuple[ServiceState, bool]]   # the (state, started_by_us) combinations a group of services has


def _start_status(seen: Seen) -> StepStatus:
    states = {state for state, _ in seen}
    if not seen or states == {S.BLOCKED}:
        return StepStatus.SKIPPED
    if S.STARTING in states:
        return StepStatus.RUNNING
    if (S.FAILED, False) in seen:
        return StepStatus.FAILED
    if all(started or state is S.BLOCKED for state, started in seen):
        return StepStatus.DONE
    return StepStatus.RUNNING if any(started for _, started in seen) else StepStatus.PENDING


def _wait_status(seen: Seen) -> StepStatus:
    states = {state for state, _ in seen}
    if not seen or states == {S.BLOCKED}:
        return StepStatus.SKIPPED
    if states & {S.FAILED, S.TIMED_OUT}:
        return StepStatus.FAILED
    if states == {S.READY}:
        return StepStatus.DONE
    return StepStatus.RUNNING if S.WAITING in states or S.READY in states else StepStatus.PENDING
