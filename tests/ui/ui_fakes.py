"""The UI tests' fakes: pdtui's scripted source and bring-ups (pdtui/sim/scripted.py), and waiting for a paint."""

from __future__ import annotations

from pdtui.sim.scripted import (
    HOSTILE_LINES,
    OOM_LINE,
    PLAN,
    PREFILL,
    T0,
    ScriptedSource,
    broken_pair_script,
    decode_failed_script,
    fabric_refused_script,
    hostile_script,
    ready_script,
    starting_script,
)
from pdtui.ui.logview import PAINT_INTERVAL, LogView

__all__ = [
    "HOSTILE_LINES", "OOM_LINE", "PLAN", "PREFILL", "T0", "ScriptedSource", "broken_pair_script", "decode_failed_script",
    "fabric_refused_script", "hostile_script", "ready_script", "starting_script", "settle",
]


async def settle(pilot) -> None:
    """Let the scripted events reach the widgets, and every log its next paint."""
    for _ in range(4):
        await pilot.pause()
    while any(view.paint_pending for view in pilot.app.query(LogView)):
        await pilot.pause(PAINT_INTERVAL / 5)
