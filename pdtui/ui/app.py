"""The Textual app: the theme, the terminal, the engine run as a worker, and the deployment's screen.

It knows the engine only through :mod:`pdtui.engine.events`: ``source.run()`` runs
as a worker in the app's loop and every event arrives as an
:class:`~pdtui.ui.bridge.EngineEvent` message, handed to the
:class:`~pdtui.ui.deployment_screen.DeploymentScreen` (the panels, the keys,
quitting).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.driver import Driver
from textual.screen import Screen
from textual.theme import Theme

from pdtui.engine.events import EventSource
from pdtui.support.exits import EXIT_INTERRUPTED
from pdtui.support.heap import RELEASE_EVERY, QuietCollector
from pdtui.ui.bridge import EngineEvent, connect
from pdtui.ui.deployment_screen import DeploymentScreen
from pdtui.ui.themes import DEFAULT_THEME, ThemeFile, available_themes, read_theme

__all__ = ["PdtuiApp", "available_themes", "run_app"]


def textual_theme(theme: ThemeFile) -> Theme:
    """A pdtui theme as the Textual theme it is written as."""
    return Theme(name=theme.textual_name, **theme.settings)


@cache
def terminal_driver(base: type[Driver]) -> type[Driver]:
    """``base`` made to hand itself to the :class:`PdtuiApp` it drives, as the app's :attr:`~PdtuiApp.terminal`.

    Textual has no public call that writes a raw sequence (its bell writes through the
    app's private driver); a driver is handed its app when created, and ``write`` is public.
    """

    class TerminalDriver(base):  # type: ignore[valid-type, misc]
        def __init__(self, app: App[Any], **kwargs: Any) -> None:
            super().__init__(app, **kwargs)
            if isinstance(app, PdtuiApp):
                app.terminal = self

    return TerminalDriver


class PdtuiApp(App[int]):
    """Shows a bring-up live; returns the exit code (``Done.exit_code``, 130 if quit before it).

    The app composes: its theme, the terminal it writes to, the engine run as a
    worker, and the :class:`DeploymentScreen` that shows it (its default screen),
    handed every engine event. Quitting closes the event source before the app
    exits: no event may arrive once the screens are gone.
    """

    TITLE = "pdtui"
    CSS_PATH = Path(__file__).with_name("layout.tcss")   # absolute: a relative one is found beside a subclass's module
    ESCAPE_TO_MINIMIZE = True
    AUTO_FOCUS = None  # no screen focuses anything of itself: the first panel takes focus once the plan arrives
    BINDINGS = [Binding("ctrl+c", "quit", "quit", show=False, priority=True)]

    def __init__(
        self,
        source: EventSource,
        *,
        theme: str = DEFAULT_THEME,
        log_limit: int = 10_000,
        clock: Callable[[], float] | None = None,
        follow_up_text: str = "",
        refuse_actions: str = "",
        baseline: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        chosen = read_theme(theme)
        self._pd_variables = chosen.variables   # asked for by App.__init__ itself
        super().__init__()
        for name in available_themes():
            self.register_theme(textual_theme(chosen if name == theme else read_theme(name)))
        self.theme = chosen.textual_name
        self.source = source
        self.deployment = DeploymentScreen(source, log_limit=log_limit, clock=clock, follow_up_text=follow_up_text,
                                           refuse_actions=refuse_actions, baseline=baseline or {})
        self.exit_summary = ""
        self._quitting = False
        self.collector = QuietCollector()
        self.terminal: Driver | None = None   # the driver writing to the terminal; none when headless

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """The chosen theme's ``pd-*`` colours: what pdtui's widgets keep under a Textual theme picked from the palette."""
        return self._pd_variables

    def get_driver_class(self) -> type[Driver]:
        return terminal_driver(super().get_driver_class())

    def get_default_screen(self) -> Screen:
        return self.deployment

    def on_mount(self) -> None:
        self.collector.start()
        self.set_class(self.no_color, "-no-color")
        self.set_interval(RELEASE_EVERY, self.collector.release, name="heap-release")

    def start_engine(self) -> None:
        """Once the deployment's screen is built (it asks): the engine's events go to it from now on."""
        connect(self.source, self)
        self.run_worker(self._bring_up(), name="bring-up", exit_on_error=False)

    async def on_unmount(self) -> None:
        """Close the event source when the app ends without quit (a served session's tab closed, SIGTERM):
        its journal tails and probes must not outlive the app."""
        self.collector.restore()
        if not self._quitting:
            self._quitting = True
            try:
                await self.source.close()
            except Exception:  # noqa: BLE001 - the app is gone: nothing left to tell it to
                pass

    async def _bring_up(self) -> None:
        """Run the engine; a crash becomes one clear line and a failed exit, never a traceback."""
        try:
            await self.source.run()
        except Exception as error:  # noqa: BLE001 - the UI boundary: report, do not crash
            self.deployment.engine_stopped(error)

    def on_engine_event(self, message: EngineEvent) -> None:
        if self._quitting or not self.screen_stack:
            return  # still in the queue when quit closed the source, or the app is exiting: the screens may be gone
        self.deployment.take(message.event)

    def write_escape(self, sequence: str) -> None:
        """Send a raw sequence to the terminal (nothing when headless: there is none)."""
        if not self.is_headless and self.terminal is not None:
            self.terminal.write(sequence)

    async def action_quit(self) -> None:
        """Ctrl+C, wherever the focus is: the deployment's screen decides (it asks first during a bring-up)."""
        await self.deployment.action_quit()

    async def leave(self, code: int, left_running: list[str]) -> None:
        """Close the event source, then exit with ``code``, saying what stays running."""
        if self._quitting:
            return
        self._quitting = True
        self.exit_summary = (
            f"pdtui: left running (pdtui never stops services): {', '.join(left_running)}"
            if left_running
            else "pdtui: no units were started"
        )
        try:
            await self.source.close()
        except Exception as error:  # noqa: BLE001 - quitting must not fail on a broken connection
            self.exit_summary += f"\npdtui: closing the connections failed: {error}"
        self.exit(code)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from self.deployment.actions.system_commands()


def run_app(source: EventSource, summary: bool = True, **kwargs: object) -> int:
    """Run the TUI until the user quits; print what was left running (not for a browser session: its stdout
    is the web protocol, and its tab is gone); return the exit code."""
    app = PdtuiApp(source, **kwargs)  # type: ignore[arg-type]
    code = app.run()
    if app.exit_summary and summary:
        print(app.exit_summary)
    return EXIT_INTERRUPTED if code is None else code
