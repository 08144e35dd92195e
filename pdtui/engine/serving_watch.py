"""One run's watch once it is ready: what fails it after ready, and a router's canary.

A fatal line, a run that is over or health that keeps failing fails the
service. One request's error (a traceback, a transfer error) never does: the
server goes on serving the next one, and neither do KV transfers that stall
(engine/transfer_watch.py warns of them). A router's canary that fails makes
it DEGRADED until one passes again. What was ready on top of a service that
failed (its router) is told it now runs without it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pdtui.engine.checks.http_status import health_check
from pdtui.engine.events import CanaryResult, Notice
from pdtui.engine.states import SERVING_STATES, ServiceState
from pdtui.engine.transfer_watch import TransferWatch

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

S = ServiceState

# After ready, health must fail this many checks in a row (over the service's unhealthy_after) to fail it.
HEALTH_FAILS_IN_A_ROW = 3


class ServingWatch:
    """One run's watch after ready, with how long its health has been failing in this start."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        self._unhealthy_since: float | None = None     # when health began failing, and how often since
        self._unhealthy_count = 0
        self.transfers = TransferWatch(run)

    async def watch(self) -> None:
        """While READY or DEGRADED: its failure looked for, its health checked, a router's canary run."""
        run = self.run
        clock, timing, failures = run.w.clock, run.w.timing, run.failure_watch
        self._unhealthy_since, self._unhealthy_count = None, 0
        failures.begin(clock())
        next_health = clock() + timing.watch_poll if run.cfg.ready.http else math.inf
        interval = run.cfg.canary if run.cfg.is_router and run.w.canary else None
        next_canary = clock() + interval if interval else math.inf
        self.transfers.begin()
        next_transfer = clock() + timing.transfer_poll if self.transfers.applies else math.inf
        while run.state in SERVING_STATES:
            failure = await failures.failure()
            if failure is None and clock() >= next_health:
                next_health = clock() + timing.watch_poll
                failure = await self._health_lost()
            if failure is None and clock() >= next_transfer:
                await self.transfers.look()
                next_transfer = clock() + timing.transfer_poll if self.transfers.applies else math.inf
            if failure:
                reason, line = failure
                run.transition(S.FAILED, f"after ready: {reason}", line)
                failures.tell_advice()
                break
            if interval and clock() >= next_canary:
                await self._canary()
                next_canary = clock() + interval
            await run.wake.sleep(min(failures.next_look(), next_health, next_canary, next_transfer) - clock())
        self._tell_degraded()

    async def canary_now(self) -> None:
        """A router: its canary now, not at its next interval (a backend it lacked is back)."""
        if self.run.state in SERVING_STATES:
            await self._canary()

    async def _canary(self) -> None:
        """One canary generation through this ready router: a failure degrades it, a pass restores it."""
        run = self.run
        check = await run.proving.canary()
        if run.state not in SERVING_STATES:
            return     # it failed meanwhile: that verdict stands
        run.w.emit(CanaryResult(run.name, check.ok, check.detail, check.latency, run.w.elapsed()))
        if check.ok and run.state is S.DEGRADED:
            run.transition(S.READY, f"canary passes again: {check.detail}")
        elif not check.ok and run.state is S.READY:
            run.transition(S.DEGRADED, f"canary failed: {check.detail}")

    async def _health_lost(self) -> tuple[str, str | None] | None:
        """One health check of a ready service; a failure once it has failed long enough in a row."""
        run = self.run
        cfg, attempt = run.cfg, run.attempt
        check = await health_check(run)
        run.tell.probe_result(check)
        now = run.w.clock()
        if check.ok:
            self._unhealthy_since, self._unhealthy_count = None, 0
            return None
        if self._unhealthy_since is None:
            self._unhealthy_since = now
        self._unhealthy_count += 1
        failing = now - self._unhealthy_since
        if self._unhealthy_count >= HEALTH_FAILS_IN_A_ROW and failing >= cfg.unhealthy_after:
            return (f"{check.name} failing for {failing:.0f}s ({self._unhealthy_count} checks in a row): "
                    f"{check.detail}", attempt.warning)
        return None

    def _tell_degraded(self) -> None:
        """It failed after it was ready: what was ready on top of it (the router) now runs without it."""
        run, w = self.run, self.run.w
        for name in w.deployment.dependents(run.name):
            if w.peers[name].state in SERVING_STATES:
                w.emit(Notice("warning", f"{name} degraded: {run.name} failed after it was ready ({run.reason})",
                              name, w.elapsed()))
