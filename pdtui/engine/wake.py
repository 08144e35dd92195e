"""What wakes a run's wait or watch at once: a line that tells something, its unit's end.

The run sleeps until its next look, probe or deadline; its lines
(engine/run_lines.py) wake it sooner. A wake that comes while the run is busy
(a probe or a look awaited) is kept: the next sleep ends at once.
"""

from __future__ import annotations

import asyncio
import contextlib

LEAST_WAIT = 0.001     # seconds: a run never waits for less (see Wake.sleep)


class Wake:
    """One run's wake-up: set by what it hears, spent by its next sleep."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        """Wake the run now, or its next sleep at once when it is not asleep."""
        self._event.set()

    async def sleep(self, seconds: float) -> None:
        """Until woken (a line, the unit's end) or ``seconds`` passed; at once when a wake came since the last
        sleep ended (the line or end that came while a probe or a look was awaited), never lost.

        ``asyncio.timeout``, not ``wait_for``: Python 3.11's ``wait_for`` loses a
        cancellation that comes as its timeout fires, and the run then never ends.
        A wait shorter than :data:`LEAST_WAIT` lasts that long, a wait of zero
        or less too: the loop runs a timer up to its clock's resolution early,
        and a moment due now by one sum may not be due yet by the difference it
        is compared with (``failure_at + settle - now`` is 0.0 while
        ``now - failure_at`` is a hair under ``settle``); it would be waited for
        again and again (for ever, on a loop whose time moves only when it waits).
        """
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(LEAST_WAIT, seconds)):
                await self._event.wait()
        self._event.clear()
