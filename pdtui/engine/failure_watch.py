"""Whether one run's service has failed: a failure line that settled, or a run that is over, and why.

Both the wait for ready and the watch after it ask this object. A fatal line
is decided once it settled (a more telling line may follow it); a traceback's
header waits a little more for the exception that ends it, which names the
cause. A run that is over (its target's look says so) is told in its target's
words, completed with what its last lines said.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdtui.engine.readiness import FailureCandidate
from pdtui.engine.tracebacks import HEADER, ranks_of

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

# A traceback's exception is the cause of a crash when it came within this many seconds of the unit's end.
CAUSE_RECENT = 30.0


def ended_reason(problem: str, cause: str | None) -> str:
    """Why a run that is over ended: its target's ``problem`` (its state), completed with ``cause`` (its target's
    own words on its end, else the exception of a traceback just before), if there is one."""
    return f"{problem}: {cause}" if cause else problem


class FailureWatch:
    """One run's failure, decided from its lines and its looks at the service."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        self.next_check = 0.0          # when the service is looked at next

    def begin(self, now: float) -> None:
        """Watch from ``now`` (its start has just looked at the service): the next look on its beat."""
        self.next_check = self.run.looks.beat(now)

    async def failure(self) -> tuple[str, str | None] | None:
        """A settled failure line or a dead unit, as (reason, line); looks at the unit when that is due."""
        run = self.run
        attempt = run.attempt
        now = run.w.clock()
        settled = attempt.failure is not None and attempt.failure_at is not None and \
            now - attempt.failure_at >= run.w.timing.settle
        if attempt.failure and settled and self._cause_due(now) <= now:
            return self._crash_reason(attempt.failure), attempt.failure.line
        # (a crash whose traceback's exception is on its way is decided once it came: the unit is looked at meanwhile)
        if attempt.unit_dirty or now >= self.next_check:
            attempt.unit_dirty = False
            self.next_check = run.looks.beat(now)
            await run._check_unit()
        if attempt.unit_problem and not attempt.failure:
            said = await run.last_words()
            if attempt.failure:
                return None          # its last lines said why: that line's settle decides
            return ended_reason(attempt.unit_problem, said or attempt.tracebacks.recent_cause(now, CAUSE_RECENT)), \
                attempt.warning
        return None

    def next_look(self) -> float:
        """When :meth:`failure` has something new to look at, at the latest."""
        attempt = self.run.attempt
        if attempt.failure and attempt.failure_at is not None:
            settled = attempt.failure_at + self.run.w.timing.settle
            return min(self.next_check, max(settled, self._cause_due(settled)))
        return self.next_check

    def tell_advice(self) -> None:
        """Under a failure, what to check next, where a source says it (docs/signatures.md names each)."""
        run = self.run
        if run.attempt.advice:
            run.tell.notice("info", f"{run.tell.who}: next: {run.attempt.advice}")

    def _cause_due(self, now: float) -> float:
        """Until when a decided crash waits for its traceback's exception: its header came, its exception not
        yet (a bounded wait: ``timing.cause`` past the settle); ``now`` or earlier when it waits for nothing."""
        attempt = self.run.attempt
        failure, since = attempt.failure, attempt.failure_at
        if failure is None or since is None or HEADER not in failure.line or attempt.tracebacks.cause is not None:
            return now
        return since + self.run.w.timing.settle + self.run.w.timing.cause

    def _crash_reason(self, failure: FailureCandidate) -> str:
        """The failure's reason; a traceback's header completed with its ranks and the exception that ended it:
        ``scheduler crashed (TP5): RuntimeError: Mooncake memory registration failed.``

        A run whose one output carries several ranks, each line labelled (a
        job over several nodes), names the rank whose line it was, and where
        its target knows it, its node; a rank that says only that a peer went
        (gloo, NCCL's watchdog) names the rank whose own exception came.
        """
        run = self.run
        reason, cause = failure.signature.reason, run.attempt.tracebacks.cause
        if HEADER in failure.line and cause is not None:
            ranks = ranks_of(failure.line)
            reason = f"{reason} ({ranks}): {cause}" if ranks else f"{reason}: {cause}"
        labelled = run.rank_of(failure.line) if run.ranks_to_join else None
        if labelled is None:
            return reason
        told = f"{run.rank_words(labelled[0])}: {reason}"
        if not run.serving.peer_lost(reason):
            return told
        watches = {0: run.attempt.tracebacks, **run.attempt.rank_tracebacks}
        causes = [(rank, watch.cause) for rank, watch in sorted(watches.items())
                  if rank != labelled[0] and watch.cause and not run.serving.peer_lost(watch.cause)]
        return f"{run.rank_words(causes[0][0])}: {causes[0][1]} (then {told})" if causes else told
