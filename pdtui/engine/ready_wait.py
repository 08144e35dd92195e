"""One run's wait for ready: its lines and its checks, until they all hold, it fails or its time runs out.

A service is ready once its ready line came (where its config names one,
from every rank that prints into its output) and every active check holds: a
backend's checks from the registry of engine/checks/, a router's end-to-end
proving (engine/router_proving.py). Its checks are probed every ``poll``, and
sooner after a line: a service that logs while it is probed is often
becoming ready. A start that runs out of time says where it stood.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pdtui.engine.checks import backend_checks
from pdtui.engine.states import ServiceState
from pdtui.vocabulary.checks import Check

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

S = ServiceState


class ReadyWait:
    """One run's wait for ready, with the active checks its service is probed with."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        self._checks = backend_checks(run.cfg, run.serving.backend_checks())

    async def wait(self, deadline: float) -> None:
        """Until READY, FAILED or TIMED_OUT (at ``deadline``); the first pass judges it once (``judged``)."""
        run = self.run
        attempt, timing, clock, failures = run.attempt, run.w.timing, run.w.clock, run.failure_watch
        next_probe = clock()
        failures.begin(next_probe)   # its start has just looked at the unit
        last_probe = -math.inf
        while True:
            failure = await failures.failure()
            if failure:
                run.transition(S.FAILED, *failure)
                failures.tell_advice()
                return
            for warning in attempt.startup.warnings(clock(), attempt.started_at, run.cfg.timeout, attempt.warning):
                run.tell.notice("warning", f"{run.tell.who}: {warning}")
            probing = attempt.log_ok or not run.cfg.ready.log
            now = clock()
            if attempt.fresh_line:
                attempt.fresh_line = False
                next_probe = min(next_probe, last_probe + timing.line_probe_gap)
            if not attempt.failure and probing and now >= next_probe:
                last_probe = now
                outcome = await self._probe()
                next_probe = now + self._poll()
                if outcome is True:
                    if attempt.enabling is not None:
                        await attempt.enabling     # ready means enabled too: the outcome never outruns it
                    run.transition(S.READY, "all checks hold")
                    return
                if isinstance(outcome, Check):
                    run.transition(S.FAILED, f"{outcome.name}: {outcome.detail}")
                    return
            now = clock()
            if now >= deadline:
                run.transition(S.TIMED_OUT, self._waiting_for(), run.attempt.warning)
                return
            if not run.judged:
                run.judged = True           # every check has had its first look
                run.w.changed()
            await run.wake.sleep(min(deadline, failures.next_look(), next_probe if probing else deadline,
                                     attempt.startup.due(attempt.started_at)) - now)

    def _poll(self) -> float:
        """How long until the next probe: a router's short while its steps before the generation are all it is
        asked (a few requests it answers from memory: a second of its start-up is worth more), else the poll."""
        run, timing = self.run, self.run.w.timing
        if run.cfg.is_router and not run.proving.generated:
            return timing.router_poll
        return timing.poll

    async def _probe(self) -> bool | Check | None:
        """Run the active checks: True when all hold, a Check when one failed for good, else None."""
        run = self.run
        if run.cfg.is_router:
            return await run.proving.verdict(run.session.host)
        for readiness in self._checks:
            check = await readiness.run(run)
            run.tell.probe_result(check)
            if not check.ok:
                return None
        return True

    def _waiting_for(self) -> str:
        """Why a start ran out of time: where it stood (the phase it was stuck in, else its phase, since when and
        its silence), else what it was still waiting for. The latest warning it logged goes with it, as its line."""
        run = self.run
        now, started = run.w.clock(), run.attempt.started_at
        stall = run.attempt.startup.stall(now, started) or run.attempt.startup.position(now, started)
        if stall is not None:
            return stall.timeout_reason(run.cfg.timeout)
        told = run.attempt.last_checks
        pending = [name for name, (ok, _) in told.items() if not ok]
        if run.cfg.ready.log and not run.attempt.log_ok:
            missing = [str(rank) for rank in range(1, run.ranks_to_join + 1) if rank not in run.attempt.joined]
            pending.insert(0, f"log line /{run.cfg.ready.log}/" if not run.attempt.ready_line else
                           f"rank {', '.join(missing)}'s ready line (its dummy health server)")
        details = [f"{n} ({told[n][1]})" if n in told else n for n in pending]
        return f"not ready after {run.cfg.timeout:g}s: waiting for " + (", ".join(details) or "readiness")
