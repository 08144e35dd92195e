"""The deployment's screen: the title bar and plan strip above the service board, the filter prompt, the keys.

The app composes it (ui/app.py) and hands it every engine event (:meth:`DeploymentScreen.take`), which the event
feed (ui/event_feed.py) shows on its widgets; the panels are the service board's (ui/service_board.py); what the
keys do beyond the screen, and quitting, are the deployment actions' (ui/deployment_actions.py). The screen keeps
the bring-up's course: under way or ended (its :class:`~pdtui.engine.events.Done`), and the elapsed time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import Footer

from pdtui.engine.events import Done, Event, EventSource
from pdtui.support.exits import EXIT_FAILED
from pdtui.support.text import inert
from pdtui.ui.deployment_actions import DeploymentActions
from pdtui.ui.event_feed import EventFeed
from pdtui.ui.filterbar import FilterBar
from pdtui.ui.header import PlanStrip, TitleBar
from pdtui.ui.logview import LogView
from pdtui.ui.merged import MergedPane
from pdtui.ui.model import ElapsedClock
from pdtui.ui.screens import HelpScreen
from pdtui.ui.service_board import WIDE, ServiceBoard

if TYPE_CHECKING:
    from pdtui.ui.app import PdtuiApp

NOTIFY_LIMIT = 400      # characters of a toast: a host's long stderr is cut, with how much more there was


class DeploymentScreen(Screen[None]):
    """The bring-up and the deployment after it, live: what the app shows under its modal screens."""

    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (81, "-medium"), (WIDE, "-wide")]
    ALLOW_IN_MAXIMIZED_VIEW = "#top, Footer, #filter-bar"
    BINDINGS = [
        Binding("question_mark", "help", "help"),
        Binding("f", "follow", "follow/pause"),
        Binding("slash", "filter", "filter"),
        Binding("z", "zoom", "zoom"),
        Binding("r", "retry", "retry"),
        Binding("R", "restart", "restart", show=False),   # in the help and the palette: the footer keeps q
        Binding("x", "stop", "stop", show=False),
        Binding("p", "pairs", "prove pairs", show=False),
        Binding("a", "all_logs", "all logs"),
        Binding("s", "save", "save"),
        Binding("q", "quit", "quit"),
    ]

    app: PdtuiApp

    def __init__(self, source: EventSource, *, log_limit: int, clock: Callable[[], float] | None,
                 follow_up_text: str, refuse_actions: str, baseline: Mapping[str, Mapping[str, float]]) -> None:
        super().__init__()
        self.follow_up_text = follow_up_text
        self.elapsed = ElapsedClock(clock or time.monotonic)
        self.done: Done | None = None
        self.in_progress = True
        self.title_bar = TitleBar()
        self.plan = PlanStrip()
        self.filter_bar = FilterBar()
        self.board = ServiceBoard(source, log_limit=log_limit, baseline=baseline)
        self.panels = self.board.panels
        """Every service's panel by its service (the board's)."""
        self.actions = DeploymentActions(self, source, refuse_actions)
        self.feed = EventFeed(self)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast of the screen as plain inert text (``markup`` is never read): most carry words from outside,
        a host's disconnect reason, a failure's reason, a notice quoting a remote program's stderr."""
        super().notify(inert(message, NOTIFY_LIMIT), title=inert(title), severity=severity, timeout=timeout,
                       markup=False)

    @property
    def merged(self) -> MergedPane | None:
        """The log of every service (the board's), once the plan came."""
        return self.board.merged

    # -- building the screen ---------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Vertical(id="top"):
            yield self.title_bar
            yield self.plan
        yield self.board
        yield self.filter_bar
        yield Footer()

    def on_mount(self) -> None:
        # advances the elapsed counters once a second, only while a bring-up is in progress
        self.ticker = self.set_interval(1.0, self.tick)
        self.app.start_engine()

    def on_resize(self) -> None:
        self.board.relayout()

    # -- the bring-up's course ------------------------------------------------------

    def take(self, event: Event) -> None:
        """An engine event from the app's queue: shown, and the counters brought to its moment."""
        self.apply(event)
        if not isinstance(event, Done):
            self.elapsed.sync(event.elapsed)
        self.tick()

    def apply(self, event: Event) -> None:
        """Show one engine event (what it does once taken from the app's queue; a caller measuring the panels alone
        hands events in here)."""
        self.feed.apply(event)

    def engine_stopped(self, error: Exception) -> None:
        """The engine crashed: one clear line and a failed outcome, never a traceback."""
        self.notify(f"bring-up stopped: {error}", severity="error", timeout=30)
        if self.done is None:
            self.in_progress = False
            self.done = Done(ok=False, exit_code=EXIT_FAILED, failures={"pdtui": str(error)})

    def ended(self, done: Done) -> None:
        """The bring-up ended: its verdict shown, the counters frozen (nothing to redraw until a retry)."""
        self.done = done
        self.in_progress = False
        self.plan.finish(done)
        self.elapsed.freeze(done.elapsed)
        self.ticker.pause()

    def retried(self) -> None:
        """A service moves again after the bring-up ended (a retry, a restart): the counters run again."""
        self.in_progress = True
        self.plan.finish(None)
        self.elapsed.resume()
        self.ticker.resume()

    def tick(self) -> None:
        """Advance the elapsed times; each widget repaints only if its text changed."""
        now = self.elapsed.now()
        self.title_bar.show_elapsed(now)
        self.board.redraw(now)

    # -- keys -----------------------------------------------------------------------------

    def focused_log(self) -> LogView | None:
        """The log the keys act on (see :meth:`ServiceBoard.log_for`)."""
        bar = self.filter_bar
        return self.board.log_for(self.focused, bar.target if bar.display else None)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_follow(self) -> None:
        log = self.focused_log()
        if log is not None:
            log.follow = not log.follow
            self.board.show_status(log, self.focused_log())

    def action_filter(self) -> None:
        log = self.focused_log()
        if log is not None:
            self.filter_bar.open(log)

    def on_filter_bar_closed(self, message: FilterBar.Closed) -> None:
        self.board.show_status(message.target, self.focused_log())

    def action_zoom(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        panel = self.board.panel_of(self.focused_log())
        if panel is not None:
            self.maximize(panel, container=False)

    def action_all_logs(self) -> None:
        self.board.toggle_all_logs()

    def action_retry(self) -> None:
        self.actions.retry()

    def action_restart(self) -> None:
        self.actions.restart()

    def action_stop(self) -> None:
        self.actions.stop()

    def action_pairs(self) -> None:
        self.actions.pairs()

    def action_save(self) -> None:
        self.actions.save()

    async def action_quit(self) -> None:
        await self.actions.quit()
