"""Service states and the transitions a service run may make between them.

Every change of state goes through :func:`check_transition`, so an impossible
sequence (a blocked service turning ready, a pending one failing) is a bug that
raises at once instead of a badge that silently lies.
"""

from __future__ import annotations

from enum import Enum


class ServiceState(str, Enum):
    PENDING = "pending"      # not started yet: waiting for its turn or its dependencies
    STARTING = "starting"    # the start command is running
    QUEUED = "queued"        # a Slurm job waiting in the queue (PENDING, for Slurm's reason)
    WAITING = "waiting"      # started; waiting until every readiness check holds
    READY = "ready"
    DEGRADED = "degraded"    # a router was ready, then its canary generation failed (back to ready when one passes)
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    BLOCKED = "blocked"      # a dependency failed or timed out: never started
    STOPPING = "stopping"    # pdtui down: the stop command runs, then its GPUs' memory is waited for
    STOPPED = "stopped"      # the unit is not running (found so, or stopped by pdtui down)

    @property
    def is_final(self) -> bool:
        """True for states a bring-up ends in (until the user retries)."""
        return self in FINAL_STATES


FINAL_STATES = frozenset({ServiceState.READY, ServiceState.DEGRADED, ServiceState.FAILED, ServiceState.TIMED_OUT,
                          ServiceState.BLOCKED, ServiceState.STOPPED})

S = ServiceState
SERVING_STATES = frozenset({S.READY, S.DEGRADED})     # proven ready once, watched since (the canary may degrade it)
JUDGED_STATES = frozenset({S.STARTING, S.WAITING, S.READY, S.DEGRADED})   # its lines are judged as they come

# Any state a service settles in can go back to PENDING: a retry, a restart, or the restart of what it comes after.
_SETTLED_TO = frozenset({S.PENDING, S.STOPPING})
ALLOWED: dict[ServiceState, frozenset[ServiceState]] = {
    # FAILED: preflight refused it; WAITING / STOPPED: found running / not running (attached, not started)
    S.PENDING: frozenset({S.STARTING, S.BLOCKED, S.FAILED, S.WAITING, S.STOPPED, S.STOPPING, S.QUEUED}),
    S.STARTING: frozenset({S.WAITING, S.FAILED, S.TIMED_OUT, S.QUEUED}),
    S.QUEUED: frozenset({S.WAITING, S.FAILED, S.TIMED_OUT}) | _SETTLED_TO,     # WAITING: the job started
    S.WAITING: frozenset({S.READY, S.FAILED, S.TIMED_OUT}) | _SETTLED_TO,   # PENDING: what it waits on restarts
    S.READY: frozenset({S.FAILED, S.DEGRADED}) | _SETTLED_TO,               # FAILED: crashed after it was ready
    S.DEGRADED: frozenset({S.READY, S.FAILED}) | _SETTLED_TO,               # READY: a canary passed again
    S.FAILED: _SETTLED_TO,
    S.TIMED_OUT: _SETTLED_TO,
    S.BLOCKED: _SETTLED_TO,
    S.STOPPING: frozenset({S.STOPPED, S.FAILED}),                           # FAILED: it would not stop
    S.STOPPED: frozenset({S.PENDING}),
}


class IllegalTransition(RuntimeError):
    """The orchestrator tried a state change the table does not allow."""


def check_transition(service: str, old: ServiceState, new: ServiceState) -> None:
    """Raise :class:`IllegalTransition` unless ``old -> new`` is in :data:`ALLOWED`."""
    if new not in ALLOWED[old]:
        raise IllegalTransition(f"{service}: {old.value} -> {new.value} is not allowed")
