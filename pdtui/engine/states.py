"""Service states and the transitions the orchestrator may make between them.

Every change of state goes through :func:`check_transition`, so an impossible
sequence (a blocked service turning ready, a pending one failing) is a bug that
raises at once instead of a badge that silently lies.
"""

from __future__ import annotations

from enum import Enum


class ServiceState(str, Enum):
    PENDING = "pending"      # not started yet: waiting for its turn or its dependencies
    STARTING = "starting"    # the start command is running
    WAITING = "waiting"      # started; waiting until every readiness check holds
    READY = "ready"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    BLOCKED = "blocked"      # a dependency failed or timed out: never started

    @property
    def is_final(self) -> bool:
        """True for states a bring-up ends in (until the user retries)."""
        return self in FINAL_STATES


FINAL_STATES = frozenset(
    {ServiceState.READY, ServiceState.FAILED, ServiceState.TIMED_OUT, ServiceState.BLOCKED}
)

S = ServiceState

ALLOWED: dict[ServiceState, frozenset[ServiceState]] = {
    S.PENDING: frozenset({S.STARTING, S.BLOCKED, S.FAILED}),   # FAILED: preflight refused it
    S.STARTING: frozenset({S.WAITING, S.FAILED, S.TIMED_OUT}),
    S.WAITING: frozenset({S.READY, S.FAILED, S.TIMED_OUT}),
    S.READY: frozenset({S.FAILED}),                             # crashed after it was ready
    S.FAILED: frozenset({S.PENDING}),                           # retry
    S.TIMED_OUT: frozenset({S.PENDING}),                        # retry
    S.BLOCKED: frozenset({S.PENDING}),                          # its dependency is retried
}


class IllegalTransition(RuntimeError):
    """The orchestrator tried a state change the table does not allow."""


def check_transition(service: str, old: ServiceState, new: ServiceState) -> None:
    """Raise :class:`IllegalTransition` unless ``old -> new`` is in :data:`ALLOWED`."""
    if new not in ALLOWED[old]:
        raise IllegalTransition(f"{service}: {old.value} -> {new.value} is not allowed")
