"""What the TUI's toasts say from outside (a host's disconnect reason, a notice quoting a remote program's stderr,
a failure's reason) is shown inert: no escape sequence reaches the terminal, no markup is read."""

from __future__ import annotations

from pdtui.engine.events import HostStatus, Notice
from pdtui.sim.scripted import starting_script
from tests.hostile import acting
from tests.ui.ui_fakes import make_app

HOSTILE = "bye \x1b]52;c;cHduZWQ=\x07\x1b[2J [bold]x[/] \u202eevil"


async def test_a_hosts_words_in_a_toast_are_inert():
    app, _ = make_app([*starting_script(), HostStatus("gpu0", "unreachable", f"connection lost: {HOSTILE}", 30.0),
                       Notice("warning", f"gpu0: journalctl stopped: {HOSTILE}", "prefill", 31.0)])
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        told = [notice for notice in app.notices if "bye" in notice]
        assert len(told) == 2 and all(acting(notice) == [] for notice in told)
        assert all("\u241b]52;c;cHduZWQ=\u2407" in notice and "[bold]x[/]" in notice for notice in told)
