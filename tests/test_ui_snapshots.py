"""SVG snapshots of the TUI at a wide, a medium and a tmux-side-pane size.

Deterministic by construction: the scripted events carry fixed host names, ports
and elapsed times, and the app gets a fixed clock.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.pilot import Pilot
from ui_fakes import FakeSource, decode_failed_script, hostile_script, ready_script, starting_script

from pdtui.ui.app import PdtuiApp

SIZES = {"wide": (160, 50), "medium": (100, 40), "narrow": (60, 24)}
SCRIPTS: dict[str, Callable[[], list]] = {
    "starting": starting_script,
    "all_ready": ready_script,
    "decode_failed": decode_failed_script,
    "hostile_lines": hostile_script,
}


async def settle(pilot: Pilot) -> None:
    for _ in range(3):
        await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scenario", SCRIPTS)
def test_snapshot(snap_compare, scenario: str, size: str) -> None:
    app = PdtuiApp(FakeSource(SCRIPTS[scenario]()), clock=lambda: 0.0)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=settle)
