"""How long start-up phases took, and when one is slow: the same for every engine.

Each engine's package says which lines begin its phases (pdtui/servers/<engine>/phases.py, a table of
pdtui/servers/phase_table.py); what a phase's length means against the last successful run does not depend on whose
lines they were, so it lives here once.
"""

from __future__ import annotations

from collections.abc import Sequence

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

