"""The TUI as a browser session that only watches: every action with a side effect (one list) refused on screen,
by key and from the palette, and done where the session may act; a save in a browser is a download, in the terminal
a new file only its owner reads; the source closed however the app ends."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from ui_fakes import settle

from pdtui.sim.scripted import ScriptedSource, decode_failed_script, ready_script
from pdtui.ui.app import PdtuiApp
from pdtui.ui.deployment_actions import SIDE_EFFECTS
from pdtui.ui.deployment_screen import DeploymentScreen
from pdtui.ui.saved_log import write_new
from pdtui.ui.screens import ConfirmScreen, RestartScreen
from pdtui.web.options import ACT, REFUSED, WATCH, refusal

KEYS = {binding.action: binding.key for binding in DeploymentScreen.BINDINGS}   # type: ignore[union-attr]
PALETTE = {"retry": "Retry", "pairs": "Prove pairs", "restart": "Restart service", "stop": "Stop service",
           "save": "Save log"}
SAVED = "pdtui-dsv4-flash-pd-prefill"


class Watching(PdtuiApp):
    """The app as a served watch-only session, keeping every notification's message."""

    def __init__(self, source: ScriptedSource, refuse: str) -> None:
        super().__init__(source, clock=lambda: 0.0, refuse_actions=refuse)
        self.notices: list[str] = []

    def notify(self, message: str, **kwargs: object) -> None:  # type: ignore[override]
        self.notices.append(message)
        super().notify(message, **kwargs)  # type: ignore[arg-type]


class InBrowser(Watching):
    """The app as a served session in a browser (the web driver's ``is_web``), keeping what it delivers."""

    def __init__(self, source: ScriptedSource, refuse: str) -> None:
        super().__init__(source, refuse)
        self.delivered: list[tuple[str, str | None]] = []

    @property
    def is_web(self) -> bool:
        return True

    def deliver_text(self, path_or_file, **kwargs) -> str | None:  # type: ignore[no-untyped-def, override]
        assert isinstance(path_or_file, io.StringIO)
        self.delivered.append((path_or_file.getvalue(), kwargs.get("save_filename")))
        return "key"


def script_for(action: str) -> list:
    """A deployment where ``action`` can be done: a failed decode to retry, else all ready."""
    return decode_failed_script() if action == "retry" else ready_script()


async def focus_for(pilot, action: str) -> None:
    if action == "retry":
        await pilot.press("tab")             # decode, the failed one


def untouched(source: ScriptedSource, cwd: Path) -> bool:
    """Nothing asked of the engine, nothing written where the app runs."""
    return source.actions == [] and source.retries == [] and list(cwd.iterdir()) == []


@pytest.mark.parametrize("by", ["key", "palette"])
@pytest.mark.parametrize("action", list(SIDE_EFFECTS))
async def test_a_watching_session_refuses_each_action_with_a_side_effect_and_says_so(action, by, tmp_path,
                                                                                     monkeypatch) -> None:
    """By its key and by its palette entry alike."""
    monkeypatch.chdir(tmp_path)
    source = ScriptedSource(script_for(action))
    app = Watching(source, refusal(WATCH))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await focus_for(pilot, action)
        if by == "key":
            await pilot.press(KEYS[action])
        else:
            [command] = [c for c in app.deployment.actions.system_commands() if c.title == PALETTE[action]]
            command.callback()
        await settle(pilot)
        assert not isinstance(app.screen, (ConfirmScreen, RestartScreen))
        assert f"{SIDE_EFFECTS[action]} refused: {REFUSED}" in app.notices
    assert untouched(source, tmp_path)


async def test_no_key_and_no_palette_entry_of_a_watching_session_has_a_side_effect(tmp_path, monkeypatch) -> None:
    """The list is whole: whatever else a watching page can press or pick asks nothing and writes nothing."""
    monkeypatch.chdir(tmp_path)
    source = ScriptedSource(decode_failed_script())
    app = Watching(source, refusal(WATCH))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("tab")
        for command in list(app.deployment.actions.system_commands()):
            if command.title != "Help":
                command.callback()
                await settle(pilot)
        for binding in DeploymentScreen.BINDINGS:
            if binding.action not in ("quit", "help"):        # type: ignore[union-attr]
                await pilot.press(binding.key)                # type: ignore[union-attr]
                await settle(pilot)
                if app.screen is not app.deployment:
                    await pilot.press("escape")
                    await settle(pilot)
        assert untouched(source, tmp_path)


@pytest.mark.parametrize("action", list(SIDE_EFFECTS))
async def test_a_session_with_the_token_and_the_terminal_do_each(action, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for refuse in (refusal(ACT), refusal(None)):
        source = ScriptedSource(script_for(action))
        app = Watching(source, refuse)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            await focus_for(pilot, action)
            await pilot.press(KEYS[action])
            await settle(pilot)
            assert not any("refused" in notice for notice in app.notices)
            done = {"retry": source.retries == ["decode"], "pairs": source.actions == [("pairs", "")],
                    "restart": isinstance(app.screen, RestartScreen), "stop": isinstance(app.screen, ConfirmScreen),
                    "save": any(notice.startswith("saved ") for notice in app.notices)}
            assert done[action], app.notices


async def test_a_save_in_a_browser_is_a_download_and_nothing_is_written_where_the_server_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = ScriptedSource(ready_script())
    app = InBrowser(source, refusal(ACT))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        total = app.deployment.panels["prefill"].log_view.total
    [(text, name)] = app.delivered
    assert name == f"{SAVED}.log" and text.count("\n") == total > 0
    assert f"sent {total} lines to the browser as {name}" in app.notices
    assert list(tmp_path.iterdir()) == []


async def test_a_save_in_the_terminal_is_a_new_file_its_owner_alone_reads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = Watching(ScriptedSource(ready_script()), refusal(None))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await pilot.press("s")
        await settle(pilot)
    first, second = tmp_path / f"{SAVED}.log", tmp_path / f"{SAVED}-1.log"
    assert stat.S_IMODE(first.stat().st_mode) == stat.S_IMODE(second.stat().st_mode) == 0o600
    assert first.read_text() == second.read_text() != ""


def test_a_save_never_writes_through_a_link_planted_under_its_name(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "pdtui-x-y.log").symlink_to(victim)
    saved = write_new(tmp_path, "pdtui-x-y", "log\n")
    assert saved.name == "pdtui-x-y-1.log" and victim.read_text() == "keep"
    assert not saved.is_symlink() and stat.S_IMODE(os.lstat(saved).st_mode) == 0o600


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
