"""The TUI as a browser session that only watches: restart, stop and retry refused on screen; the source closed
however the app ends."""

from __future__ import annotations

import pytest
from ui_fakes import settle

from pdtui.sim.scripted import ScriptedSource, decode_failed_script, ready_script
from pdtui.ui.app import PdtuiApp
from pdtui.ui.screens import ConfirmScreen, RestartScreen
from pdtui.web.options import REFUSED, WATCH, refusal


class Watching(PdtuiApp):
    """The app as a served watch-only session, keeping every notification's message."""

    def __init__(self, source: ScriptedSource, refuse: str) -> None:
        super().__init__(source, clock=lambda: 0.0, refuse_actions=refuse)
        self.notices: list[str] = []

    def notify(self, message: str, **kwargs: object) -> None:  # type: ignore[override]
        self.notices.append(message)
        super().notify(message, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("key", "verb", "script"), [("R", "restart", ready_script), ("x", "stop", ready_script),
                                                     ("r", "retry", decode_failed_script)])
async def test_a_watching_session_refuses_and_says_so(key, verb, script) -> None:
    source = ScriptedSource(script())
    app = Watching(source, refusal(WATCH))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        if verb == "retry":
            await pilot.press("tab")         # decode, the failed one
        await pilot.press(key)
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert f"{verb} refused: {REFUSED}" in app.notices
    assert source.actions == [] and source.retries == []


async def test_p_proves_the_pairs_again_when_acting_and_is_refused_when_watching() -> None:
    acting, watching = ScriptedSource(ready_script()), ScriptedSource(ready_script())
    for source, refuse in ((acting, refusal("act")), (watching, refusal(WATCH))):
        app = Watching(source, refuse)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            await pilot.press("p")
            await settle(pilot)
        told = "proving every prefill × decode pair" if source is acting else f"proving the pairs refused: {REFUSED}"
        assert told in app.notices
    assert acting.actions == [("pairs", "")] and watching.actions == []


async def test_the_palette_refuses_too() -> None:
    source = ScriptedSource(ready_script())
    app = Watching(source, refusal(WATCH))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.deployment.action_restart()
        app.deployment.action_stop()
        await settle(pilot)
        assert [n.split(":")[0] for n in app.notices if "refused" in n] == ["restart refused", "stop refused"]
    assert source.actions == []


async def test_a_session_with_the_token_asks_as_the_terminal_does() -> None:
    source = ScriptedSource(ready_script())
    app = Watching(source, refusal("act"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)
        assert isinstance(app.screen, RestartScreen)
        await pilot.press("y")
        await settle(pilot)
    assert source.actions == [("restart", "prefill")]


async def test_the_source_is_closed_when_the_app_ends_without_quit() -> None:
    """A served session ends by the web driver's quit (tab closed, SIGTERM), not by ``q``: its tails must end too."""
    source = ScriptedSource(ready_script())
    app = Watching(source, refusal(WATCH))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.exit()
    assert source.closed
