"""What the UI tests wait on beside pdtui's scripted bring-ups (pdtui/sim/scripted.py): the widgets' next paint."""

from __future__ import annotations

from pdtui.ui.logview import PAINT_INTERVAL, LogView


async def settle(pilot) -> None:
    """Let the scripted events reach the widgets, and every log its next paint."""
    for _ in range(4):
        await pilot.pause()
    while any(view.paint_pending for view in pilot.app.query(LogView)):
        await pilot.pause(PAINT_INTERVAL / 5)
