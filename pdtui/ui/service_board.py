"""The screen's body: a panel per service (backends above routers), the log of every service, and how they share the
height.

The board owns its panels: it builds them from the plan, routes every line to the panel (or rank) it belongs to,
knows which log a key acts on, and tells the engine which panels are on screen (only their figures are fetched).
"""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Container, Vertical
from textual.reactive import var
from textual.widget import Widget

from pdtui.engine.events import EventSource, LineKind, LogRecord, PlanReady, ServiceInfo
from pdtui.gpus.sampler import GpuSample
from pdtui.ui.logview import LogView
from pdtui.ui.merged import MergedPane
from pdtui.ui.model import ServiceView
from pdtui.ui.panel import ServicePanel

ROUTER_ROLE = "router"
WIDE = 120
"""From this many columns the backends sit side by side (the screen's ``-wide`` class; layout.tcss keys on it)."""


class ServiceBoard(Container):
    """Every service's panel, or the log of every service in their place (``a``)."""

    all_logs: var[bool] = var(False, init=False, toggle_class="-merged")
    """The log of every service is shown in place of the panels (layout.tcss keys on ``-merged``)."""

    def __init__(self, source: EventSource, *, log_limit: int, baseline: Mapping[str, Mapping[str, float]]) -> None:
        super().__init__(id="body")
        self.source = source
        self.log_limit = log_limit
        self.baseline = baseline               # each service's phase lengths in its last successful run
        self.deployment = ""                   # the deployment's name, once the plan came
        self.panels: dict[str, ServicePanel] = {}
        self.owners: dict[str, ServicePanel] = {}     # every service's panel: a rank >= 1 is drawn in its server's
        self.merged: MergedPane | None = None

    def compose(self) -> ComposeResult:
        yield Container(id="backends")
        yield Vertical(id="routers")

    def on_mount(self) -> None:
        self.watch(self.screen, "maximized", lambda _: self.tell_shown(), init=False)

    def build(self, plan: PlanReady) -> None:
        """A panel per service, but one per server over several nodes: its ranks >= 1 are rows of rank 0's."""
        self.deployment = plan.deployment
        backends = self.query_one("#backends")
        routers = self.query_one("#routers")
        ranks: dict[str, list[ServiceInfo]] = {}
        for info in plan.services:
            if info.server:
                ranks.setdefault(info.server, []).append(info)
        for info in plan.services:
            if info.server:
                continue
            panel = ServicePanel(info, log_limit=self.log_limit, ranks=ranks.get(info.name, ()))
            self.panels[info.name] = panel
            for view in panel.ranks:
                view.last = dict(self.baseline.get(view.info.name, {}))
                self.owners[view.info.name] = panel
            (routers if info.role == ROUTER_ROLE else backends).mount(panel)
        self.merged = MergedPane(list(self.owners), log_limit=self.log_limit)
        self.mount(self.merged)
        self.relayout()
        self.tell_shown()

    def tell_shown(self) -> None:
        """Tell the engine which panels are on screen: only their servers' figures are fetched."""
        maximized = self.screen.maximized
        if self.all_logs:
            shown: list[str] = []
        elif isinstance(maximized, ServicePanel):
            shown = [maximized.service]
        else:
            shown = list(self.panels)
        self.source.show_figures(shown)

    def watch_all_logs(self) -> None:
        """The engine fetches no figures while the log of every service hides the panels."""
        self.tell_shown()

    def relayout(self) -> None:
        """Share the height between the backend rows and the router rows.

        Wide: backends side by side in one row (weighted 3) above the routers;
        otherwise every panel is stacked and weighted equally. A stacked panel with nothing to show (blocked,
        no line) folds to its few header lines and gives the rest to the others.
        """
        if not self.panels:
            return
        wide = self.screen.size.width >= WIDE
        for panel in self.panels.values():
            stacked = not wide or panel.view.info.role == ROUTER_ROLE
            panel.set_class(stacked and panel.idle, "-folded")
        share(self.query_one("#backends"), [p for p in self.panels.values() if p.view.info.role != ROUTER_ROLE],
              weight=3 if wide else None)
        share(self.query_one("#routers"), [p for p in self.panels.values() if p.view.info.role == ROUTER_ROLE])

    def redraw(self, now: float) -> None:
        """Every panel at elapsed ``now``; each repaints only what changed."""
        for panel in self.panels.values():
            panel.redraw(now)

    def view(self, service: str) -> tuple[ServicePanel, ServiceView] | None:
        """The panel a service is drawn in, and its view there (a rank's own, in its server's panel)."""
        panel = self.owners.get(service)
        view = panel.rank(service) if panel is not None else None
        return (panel, view) if panel is not None and view is not None else None

    def append(self, service: str, lines: tuple[LogRecord, ...], heard: float | None) -> None:
        """Lines into a service's panel (and the log of every service, when open); ``heard``: the elapsed time the
        service's own lines came at (None for pdtui's)."""
        panel = self.owners.get(service)
        if panel is None or not lines:
            return
        panel.append(lines, service, heard)
        if panel.has_class("-folded"):
            self.relayout()
        if self.merged is not None and self.all_logs:
            self.merged.log_view.append(lines, [service] * len(lines))
            self.merged.status.show_state(self.merged.log_view)

    def system_line(self, service: str | None, text: str, kind: LineKind = LineKind.SYSTEM) -> None:
        """One line of pdtui's own in a service's log (a check's outcome, a notice): not a line the service said."""
        if service is not None:
            self.append(service, (LogRecord(text, kind),), None)

    def show_gpus(self, sample: GpuSample) -> None:
        """A host's GPU reading on every rank placed there, each its own GPUs."""
        for service, panel in self.owners.items():
            view = panel.rank(service)
            if view is not None and view.info.host == sample.host and view.info.gpus:
                panel.show_gpus(service, [gpu for gpu in sample.gpus if gpu.index in view.info.gpus])

    def first_log(self) -> LogView | None:
        """The first panel's log: where the focus goes when nothing else holds it."""
        return next((panel.log_view for panel in self.panels.values()), None)

    def log_for(self, focused: Widget | None, filtering: LogView | None) -> LogView | None:
        """The log a key acts on: the focused one, else the one being filtered, else the log of every service when
        it is shown, else the first panel's."""
        if isinstance(focused, LogView):
            return focused
        if filtering is not None:
            return filtering
        if self.all_logs and self.merged is not None:
            return self.merged.log_view
        return self.first_log()

    def panel_of(self, log: LogView | None) -> ServicePanel | None:
        """The panel whose log ``log`` is (none for the log of every service)."""
        return next((p for p in self.panels.values() if p.log_view is log), None)

    def show_status(self, log: LogView, focused: LogView | None) -> None:
        """``log``'s state (following, filtered) on a status line: the log of every service's, else the focused
        panel's."""
        merged_log = self.merged.log_view if self.merged is not None else None
        owner = self.panel_of(focused) if log is not merged_log else self.merged
        if owner is not None:
            owner.status.show_state(log)

    def toggle_all_logs(self) -> None:
        """Show the log of every service in place of the panels, or the panels again; it is rebuilt in time order
        each time it opens."""
        if self.merged is None:
            return
        if self.all_logs:
            self.all_logs = False
            first = self.first_log()
            if first is not None:
                first.focus()
            return
        self.screen.minimize()
        self.merged.rebuild([list(panel.merged_rows()) for panel in self.panels.values()])
        self.all_logs = True
        self.merged.log_view.focus()

    def started_units(self) -> list[str]:
        """Units pdtui started in this session, in plan order (a server's over several nodes each with its host)."""
        return [f"{view.info.unit} on {view.info.host}" if panel.wide else view.info.unit
                for panel in self.panels.values() for view in panel.ranks if view.started]


def share(rows: Widget, panels: list[ServicePanel], weight: int | None = None) -> None:
    """A group's height: ``weight`` (or one part per open panel) of the screen, only its header lines when every
    panel in it is folded, none when it has no panel."""
    rows.set_class(not panels, "-empty")
    open_panels = sum(not panel.has_class("-folded") for panel in panels)
    rows.styles.height = f"{weight or open_panels}fr" if open_panels else "auto"
