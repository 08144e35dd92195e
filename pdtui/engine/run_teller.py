"""What one run tells the faces beside its state: notices about its service, and its checks as they change.

A notice names the service as the user finds it (a rank >= 1 by its server and
node); a check's result is told when it differs from the last one this start
told, so that a check polled every second tells only its changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdtui.engine.events import Notice, ProbeResult
from pdtui.vocabulary.checks import Check

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun


class RunTeller:
    """One run's notices and check results, told through its bring-up."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run

    @property
    def who(self) -> str:
        """How its notices name it: ``decode``, or a rank >= 1 by its server and node, ``decode: rank 1 on gpu-b``."""
        cfg = self.run.cfg
        return f"{cfg.server}: rank {cfg.rank} on {cfg.host}" if cfg.follower else self.run.name

    def notice(self, level: str, text: str) -> None:
        """Tell something about this service that is not a change of its state."""
        w = self.run.w
        w.emit(Notice(level, text, self.run.name, w.elapsed()))

    def probe_result(self, check: Check, *, again: bool = False) -> None:
        """Tell a check's result when it differs from the last one told in this start (``again``: asked for, told
        anyway)."""
        run = self.run
        told = run.attempt.last_checks
        if again or told.get(check.name) != (check.ok, check.detail):
            told[check.name] = (check.ok, check.detail)
            run.w.emit(ProbeResult(run.name, check.name, check.ok, check.detail, check.latency, run.w.elapsed()))
