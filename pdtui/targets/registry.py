"""Which target each service and each place of the config belongs to: the one place that knows every kind.

A service runs on the target of the kind of place it is on (its ``placement``): a systemd unit on its host, or a
Slurm job on its cluster; each place has the session of its kind.
The composition root (commands/, the demo, a bench, a test) hands a :class:`Registry` to the orchestrator: the
engine sits below the targets and reaches them only through it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from pdtui.config import Deployment, PlacementKind, ServiceConfig
from pdtui.engine.readiness import LineJudge
from pdtui.engine.service_run import ServiceRun
from pdtui.engine.session import Session
from pdtui.hosts.base import Host
from pdtui.servers import serving_for
from pdtui.targets.slurm.cluster_session import ClusterSession
from pdtui.targets.slurm.job_run import JobRun
from pdtui.targets.slurm.settings import JOBS
from pdtui.targets.systemd.host_session import HostSession
from pdtui.targets.systemd.settings import UNITS
from pdtui.targets.systemd.unit_run import UnitRun

HostFactory = Callable[..., Host]
_RUNS: dict[PlacementKind, Callable[[ServiceConfig, LineJudge], ServiceRun]] = {UNITS: UnitRun, JOBS: JobRun}
_SESSIONS: dict[PlacementKind, Callable[..., Session]] = {UNITS: HostSession, JOBS: ClusterSession}


@dataclass(frozen=True, slots=True)
class Registry:
    """Every target, their places reached through ``host_factory``: what the composition root hands the orchestrator
    (:class:`pdtui.engine.session.Targets`), so the engine imports no target and never asks which kind it has."""

    host_factory: HostFactory

    def new_run(self, cfg: ServiceConfig) -> ServiceRun:
        """A service's run on its target, judging its lines with its serving engine's signatures for its role."""
        return _RUNS[cfg.placement](cfg, _judge(cfg))

    def open_sessions(self, deployment: Deployment, places: Collection[str], on_status: Callable[..., None], *,
                      command_timeout: float, clock: Callable[[], float]) -> dict[str, Session]:
        """A session for each of ``places`` (hosts and clusters the services name), each with its own connection."""
        sessions: dict[str, Session] = {}
        for kind, session in _SESSIONS.items():
            for name, cfg in deployment.places(kind.place).items():
                if name in places:
                    sessions[name] = session(cfg, self.host_factory(cfg, on_status=on_status),
                                             command_timeout=command_timeout, clock=clock)
        return sessions


_judges: dict[tuple[str, str, tuple[str, ...], str | None], LineJudge] = {}


def _judge(cfg: ServiceConfig) -> LineJudge:
    """One judge for each kind of service (a judge keeps nothing of the lines it judged): a fleet has a thousand
    services and a few kinds, and a judge's signatures take 25 µs to hash for a cache's look-up."""
    serving = serving_for(cfg)
    key = (serving.name, cfg.role, cfg.fail, cfg.ready.log)
    judge = _judges.get(key)
    if judge is None:
        judge = _judges[key] = LineJudge(cfg.ready.log, serving.signatures_for(cfg.role, cfg.fail))
    return judge
