"""SVG snapshots of the TUI at a wide, a medium and a tmux-side-pane size, and of the screens keys open.

Deterministic by construction: the scripted events carry fixed host names, ports
and elapsed times, the app gets a fixed clock, and a text cursor on screen does not blink.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widgets import Input
from ui_fakes import SteadyApp, settle

from pdtui.sim.scripted import (
    ScriptedSource,
    broken_pair_script,
    decode_failed_script,
    fabric_refused_script,
    failed_after_ready_script,
    hostile_script,
    ready_script,
    starting_script,
    wide_failed_script,
    wide_stalled_script,
)
from pdtui.ui.app import PdtuiApp

SIZES = {"wide": (160, 50), "medium": (100, 40), "narrow": (60, 24)}
SCRIPTS: dict[str, Callable[[], list]] = {
    "starting": starting_script,
    "all_ready": ready_script,
    "decode_failed": decode_failed_script,
    "failed_after_ready": failed_after_ready_script,
    "hostile_lines": hostile_script,
    "broken_pair": broken_pair_script,
    "fabric_refused": fabric_refused_script,
    "wide_stalled": wide_stalled_script,
    "wide_failed": wide_failed_script,
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scenario", SCRIPTS)
def test_snapshot(snap_compare, scenario: str, size: str) -> None:
    app = SteadyApp(ScriptedSource(SCRIPTS[scenario]()), clock=lambda: 0.0)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=settle)


settle_logs = settle     # the events in, and every log painted


async def steady_filter_bar(pilot: Pilot) -> None:
    """As :func:`settle_logs`, with the filter prompt's cursor held still (it blinks on a timer)."""
    await settle_logs(pilot)
    assert isinstance(pilot.app, PdtuiApp)
    pilot.app.deployment.filter_bar.input.cursor_blink = False


async def open_command_palette(pilot: Pilot) -> None:
    """Open the palette, wait until its commands are listed, and hold its cursor still."""
    await settle_logs(pilot)
    await pilot.press("ctrl+p")
    palette = pilot.app.screen
    assert isinstance(palette, CommandPalette)
    palette.query_one(Input).cursor_blink = False
    commands = palette.query_one(CommandList)
    while not commands.option_count:
        await pilot.pause(0.05)
    await settle(pilot)


# Screens reached by keys, at the medium size: (script, keys, what to do first).
INTERACTIONS: dict[str, tuple[Callable[[], list], tuple[str, ...], Callable[[Pilot], Awaitable[None]]]] = {
    "help_open": (starting_script, ("question_mark",), settle_logs),
    "filter_typed": (decode_failed_script, ("tab", "slash", *"out of memory"), steady_filter_bar),
    "filter_applied": (decode_failed_script, ("tab", "slash", *"out of memory", "enter"), steady_filter_bar),
    "zoomed_panel": (starting_script, ("tab", "z"), settle_logs),
    "failed_panel_focused": (decode_failed_script, ("tab",), settle_logs),
    "command_palette": (starting_script, (), open_command_palette),
}


@pytest.mark.parametrize("interaction", INTERACTIONS)
def test_interaction_snapshot(snap_compare, interaction: str) -> None:
    script, keys, before = INTERACTIONS[interaction]
    app = SteadyApp(ScriptedSource(script()), clock=lambda: 0.0)

    async def keys_then_settle(pilot: Pilot) -> None:
        """The keys, then every log's paint they caused: a loaded machine paints later than the picture is taken."""
        await before(pilot)
        await pilot.press(*keys)
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZES["medium"], run_before=keys_then_settle)
