"""One run's looks at its service where it runs: on its place's beat, fresh for so long, answered or not.

Every service of a host is looked at on the same beat, so that a host's looks
share one command (a unit's ``systemctl show``, a cluster's ``squeue``). A look
its place did not answer tells nothing of the service: it is looked at again
on its beat.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from pdtui.engine.states import SERVING_STATES
from pdtui.hosts.base import UNANSWERED, HostTimedOut

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

T = TypeVar("T")

# A host's unit looks take at most about 1/(1 + LOOK_REST) of its time (see RunLooks.beat).
LOOK_REST = 4.0
# A look this many beats old still decides how a unit is started: looks on the beat are a beat apart, plus the
# time each command takes.
FRESH_LOOKS = 1.5


class RunLooks:
    """When its run looks at its service, and what a look that was not answered tells."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run

    def beat(self, now: float) -> float:
        """The next moment the unit is looked at: every service on the same beat, so a host's looks share a command.

        A host whose looks are slow (a loaded machine) is looked at on a later
        beat: after a look that took d seconds, none before LOOK_REST * d. Its
        units' ends still wake their services at once, through systemd's lines.
        A ready service whose target logs its end is looked at on the slower
        ``unit_watch`` beat (a multiple of ``unit_poll``: the looks still share).
        """
        poll, rest = self._poll(), self._rest()
        origin = self.run.w.beat_origin()
        return origin + (math.floor((now + rest - origin) / poll) + 1) * poll

    def is_fresh(self, at: float) -> bool:
        """Whether a look made at ``at`` still decides how the unit is started: it is younger than FRESH_LOOKS
        gaps between two looks on its beat, a slow host's rest included (its looks are that far apart)."""
        return self.run.w.clock() - at < FRESH_LOOKS * (self._poll() + self._rest())

    async def answered(self, look: Awaitable[T]) -> T | None:
        """``look``'s answer; None when it told nothing of the service: its host out of reach (the host's status
        says so) or too slow to answer (told here, once while it lasts; a host loading weights on every core may
        take more than the command timeout for a ``systemctl show``). It is looked at again on its beat, and its
        timeout counts meanwhile: a slow look is no failure of the service."""
        run = self.run
        try:
            answer = await look
        except UNANSWERED as exc:
            if isinstance(exc, HostTimedOut) and not run.attempt.looks_late:
                run.attempt.looks_late = True
                run.tell.notice("warning", f"{exc}: it is looked at again on its beat (a loaded host answers late)")
            return None
        run.attempt.looks_late = False
        return answer

    def _poll(self) -> float:
        run, timing = self.run, self.run.w.timing
        return timing.unit_watch if run.ends_in_its_lines and run.state in SERVING_STATES else timing.unit_poll

    def _rest(self) -> float:
        return LOOK_REST * self.run.session.looker.last_took
