"""How long start-up phases took, when one is slow, and which line starts the next: the same for every engine.

Each engine's package says which lines begin its phases (pdtui/servers/<engine>/phases.py); what a phase's length
means against the last successful run does not depend on whose lines they were, so it lives here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

SLOW = 3.0
"""A phase this many times as long as in the last successful run (or more) is warned about."""
SLOW_FLOOR = 1.0
"""Below this many seconds a phase is never slow: 0.1 s against 0.02 s is noise, not news."""
STILL_RUNNING_FLOOR = 60.0
"""A phase still under way is called slow only after this many seconds too (and three times its last run's)."""


def slow(seconds: float, last: float | None) -> bool:
    """A phase that took three times as long as in the last successful run (and a second)."""
    return last is not None and last > 0 and seconds >= SLOW_FLOOR and seconds >= SLOW * last


def slow_from(last: float) -> float:
    """How long a phase still under way runs before it is slow: three times its last length, and a minute."""
    return max(STILL_RUNNING_FLOOR, SLOW * last, SLOW_FLOOR)


def durations(starts: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Each phase's duration from (phase, start time) pairs in order: until the next phase's start.

    The last phase (the ready line, or the one a failure cut short) has none.
    """
    pairs = zip(starts, starts[1:], strict=False)
    return {name: round(max(0.0, after - at), 3) for (name, at), (_, after) in pairs}


class PhaseTracker:
    """One invocation's phases so far: tells which line starts a new one (only ever a later one). An engine's
    tracker gives its own ``phase_of`` (the phase a line begins) and ``order`` (each phase's place, ``ready``
    last, ``http`` among them)."""

    __slots__ = ("current",)
    order: ClassVar[Mapping[str, int]]

    @staticmethod
    def phase_of(message: str) -> str | None:
        """The phase a line begins, whatever came before it: the engine's."""
        raise NotImplementedError

    def __init__(self) -> None:
        self.current: str | None = None

    @property
    def over(self) -> bool:
        """The ready line has come: no line starts a phase any more (and none needs looking at)."""
        return self.current == "ready"

    @property
    def serving_http(self) -> bool:
        """Its HTTP server is starting (the ``http`` phase or a later one began): its arguments are fixed, and it
        answers within moments."""
        return self.current is not None and self.order[self.current] >= self.order["http"]

    def feed(self, message: str) -> str | None:
        """The phase ``message`` begins, when it is later than the current one; None otherwise."""
        if self.over:
            return None
        phase = self.phase_of(message)
        if phase is None or (self.current is not None and self.order[phase] <= self.order[self.current]):
            return None
        self.current = phase
        return phase
