"""The deployment's screen: one panel per service, the plan strip, the keys and their actions, quitting.

The app composes it (ui/app.py) and hands it every engine event
(:meth:`DeploymentScreen.apply`); it asks the engine for nothing but through the
event source's few commands (retry, restart, stop, prove the pairs, which
figures to fetch). Quitting is decided here (asked first while a bring-up is
under way) and carried out by the app, which closes the source before it exits.
"""

from __future__ import annotations

import functools
import io
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from functools import singledispatchmethod
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from pdtui.config import BACKEND_ROLES
from pdtui.config.fields import format_elapsed
from pdtui.engine.events import (
    CanaryResult,
    Done,
    Event,
    EventSource,
    HostStatus,
    JobStatus,
    LineKind,
    LogLines,
    LogRecord,
    Notice,
    PairMatrix,
    PhaseStarted,
    PlanReady,
    PreflightFinding,
    ProbeResult,
    ServerFailed,
    ServiceInfo,
    ServingFigures,
    StateChanged,
    StepChanged,
    UnitStatus,
)
from pdtui.engine.intent import RestartHow
from pdtui.engine.states import SERVING_STATES, ServiceState
from pdtui.faces.outcome import since_ready
from pdtui.faces.timeline import slower
from pdtui.gpus.sampler import GpuSample
from pdtui.support.exits import EXIT_FAILED, EXIT_INTERRUPTED
from pdtui.support.private_files import create_private
from pdtui.support.text import inert
from pdtui.ui.filterbar import FilterBar
from pdtui.ui.header import PlanStrip, TitleBar
from pdtui.ui.logview import LogView
from pdtui.ui.merged import MergedPane
from pdtui.ui.model import ElapsedClock, ServiceView
from pdtui.ui.notify import desktop_notification
from pdtui.ui.panel import ServicePanel
from pdtui.ui.screens import ConfirmScreen, HelpScreen, QuitScreen, RestartScreen

if TYPE_CHECKING:
    from pdtui.ui.app import PdtuiApp

ROUTER_ROLE = "router"
WIDE = 120
NOTIFY_LIMIT = 400      # characters of a toast: a host's long stderr is cut, with how much more there was
"""From this many columns the backends sit side by side (the ``-wide`` class; layout.tcss keys on it)."""

HOST_SEVERITY: dict[str, SeverityLevel] = {"error": "error", "unreachable": "warning"}
NOTICE_SEVERITY: dict[str, SeverityLevel] = {"warning": "warning", "error": "error"}

SIDE_EFFECTS: dict[str, str] = {
    "retry": "retry",
    "restart": "restart",           # drained, rolled or at once: the choice comes after the gate
    "stop": "stop",
    "pairs": "proving the pairs",   # a request to every prefill x decode pair
    "save": "saving a log",         # a file (the terminal) or a download (a browser with the token)
}
"""Every action of the screen with an effect beyond it (a service, the engine's requests, a file), by the words its
refusal says: what a page served to watch refuses, by key, from the palette or called. The one list: each
``action_NAME`` here is wrapped by :func:`_gated` once, below the class."""
SAVE_ATTEMPTS = 10_000
"""Numbered names a save tries before it gives up (each press takes a new one; none is ever overwritten)."""


def _safe_name(name: str) -> str:
    """A file-name-safe form of a deployment or service name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "pdtui"


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

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast of the screen as plain inert text (``markup`` is never read): most carry words from outside,
        a host's disconnect reason, a failure's reason, a notice quoting a remote program's stderr."""
        super().notify(inert(message, NOTIFY_LIMIT), title=inert(title), severity=severity, timeout=timeout,
                       markup=False)
    def __init__(self, source: EventSource, *, log_limit: int, clock: Callable[[], float] | None,
                 follow_up_text: str, refuse_actions: str, baseline: Mapping[str, Mapping[str, float]]) -> None:
        super().__init__()
        self.source = source
        self.log_limit = log_limit
        self.follow_up_text = follow_up_text
        self.refuse_actions = refuse_actions   # why every action in SIDE_EFFECTS is refused (a page served to watch)
        self.baseline = baseline               # each service's phase lengths in its last successful run
        self.elapsed = ElapsedClock(clock or time.monotonic)
        self.panels: dict[str, ServicePanel] = {}
        self._owners: dict[str, ServicePanel] = {}     # every service's panel: a rank >= 1 is drawn in its server's
        self.merged: MergedPane | None = None
        self.done: Done | None = None
        self.in_progress = True
        self._deployment = ""
        self._probes: dict[tuple[str, str], bool] = {}
        self.title_bar = TitleBar()
        self.plan = PlanStrip()
        self.filter_bar = FilterBar()

    # -- building the screen ---------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Vertical(id="top"):
            yield self.title_bar
            yield self.plan
        with Container(id="body"):
            yield Container(id="backends")
            yield Vertical(id="routers")
        yield self.filter_bar
        yield Footer()

    def on_mount(self) -> None:
        # advances the elapsed counters once a second, only while a bring-up is in progress
        self.ticker = self.set_interval(1.0, self.tick)
        self.watch(self, "maximized", lambda _: self._tell_shown(), init=False)
        self.app.start_engine()

    def _mount_panels(self, plan: PlanReady) -> None:
        """A panel per service, but one per server over several nodes: its ranks >= 1 are rows of rank 0's."""
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
                self._owners[view.info.name] = panel
            (routers if info.role == ROUTER_ROLE else backends).mount(panel)
        self.merged = MergedPane(list(self._owners), log_limit=self.log_limit)
        self.query_one("#body").mount(self.merged)
        self._relayout()
        self._tell_shown()
        if self.panels:
            self.call_after_refresh(next(iter(self.panels.values())).log_view.focus)
        self.call_after_refresh(self.app.collector.settle)   # the screen is built: its objects stay

    def on_resize(self) -> None:
        self._relayout()

    def _tell_shown(self) -> None:
        """Tell the engine which panels are on screen: only their servers' figures are fetched."""
        if self.has_class("-merged"):
            shown: list[str] = []
        elif isinstance(self.maximized, ServicePanel):
            shown = [self.maximized.service]
        else:
            shown = list(self.panels)
        self.source.show_figures(shown)

    def _relayout(self) -> None:
        """Share the height between the backend rows and the router rows.

        Wide: backends side by side in one row (weighted 3) above the routers;
        otherwise every panel is stacked and weighted equally. A stacked panel with nothing to show (blocked,
        no line) folds to its few header lines and gives the rest to the others.
        """
        if not self.panels:
            return
        wide = self.size.width >= WIDE
        for panel in self.panels.values():
            stacked = not wide or panel.view.info.role == ROUTER_ROLE
            panel.set_class(stacked and panel.idle, "-folded")
        self._share(self.query_one("#backends"), [p for p in self.panels.values() if p.view.info.role != ROUTER_ROLE],
                    weight=3 if wide else None)
        self._share(self.query_one("#routers"), [p for p in self.panels.values() if p.view.info.role == ROUTER_ROLE])

    @staticmethod
    def _share(rows: Widget, panels: list[ServicePanel], weight: int | None = None) -> None:
        """A group's height: ``weight`` (or one part per open panel) of the screen, only its header lines when
        every panel in it is folded, none when it has no panel."""
        rows.set_class(not panels, "-empty")
        open_panels = sum(not panel.has_class("-folded") for panel in panels)
        rows.styles.height = f"{weight or open_panels}fr" if open_panels else "auto"

    # -- engine events ---------------------------------------------------------------

    def take(self, event: Event) -> None:
        """An engine event from the app's queue: shown, and the counters brought to its moment."""
        self.apply(event)
        if not isinstance(event, Done):
            self.elapsed.sync(event.elapsed)
        self.tick()

    def engine_stopped(self, error: Exception) -> None:
        """The engine crashed: one clear line and a failed outcome, never a traceback."""
        self.notify(f"bring-up stopped: {error}", severity="error", timeout=30)
        if self.done is None:
            self.in_progress = False
            self.done = Done(ok=False, exit_code=EXIT_FAILED, failures={"pdtui": str(error)})

    @singledispatchmethod
    def apply(self, event: Event) -> None:
        """Show one engine event: each kind to its own handler, registered below by the type it takes.

        What an engine event does once taken from the app's queue; a caller measuring the panels alone
        hands events in here."""

    @apply.register
    def _on_plan(self, plan: PlanReady) -> None:
        self._deployment = plan.deployment
        self.title_bar.show_deployment(plan.deployment, plan.config)
        self.title_bar.activity = "bring-up" if plan.title == "bringing up" else plan.title
        self.plan.set_steps(plan.steps)
        self._mount_panels(plan)

    @apply.register
    def _on_step(self, event: StepChanged) -> None:
        self.plan.apply(event)

    def _view(self, service: str) -> tuple[ServicePanel, ServiceView] | None:
        """The panel a service is drawn in, and its view there (a rank's own, in its server's panel)."""
        panel = self._owners.get(service)
        view = panel.rank(service) if panel is not None else None
        return (panel, view) if panel is not None and view is not None else None

    @apply.register
    def _on_state(self, event: StateChanged) -> None:
        found = self._view(event.service)
        if found is None:
            return
        panel, view = found
        self.plan.follow(event)
        if not self.in_progress and not event.new.is_final:
            self._retry_started()
        serving = panel.view.figures is not None
        view.apply(event)
        panel.redraw(self.elapsed.now())
        if panel.idle != panel.has_class("-folded"):
            self._relayout()
        if serving and panel.view.figures is None:
            panel.show_figures()
        if ServiceState.DEGRADED in (event.new, event.old) and event.new in SERVING_STATES:
            self._canary_verdict(event)

    def _canary_verdict(self, event: StateChanged) -> None:
        """A ready router degraded (toast and bell: serving is failing), or serves again."""
        if event.new is ServiceState.DEGRADED:
            self.notify(f"{event.service} degraded: {event.reason}", severity="error", timeout=20, markup=False)
            self.app.bell()
        else:
            self.notify(f"{event.service} ready again: {event.reason}", markup=False)
        self._system_line(event.service, f"· {event.service} {event.new.value}: {event.reason}",
                          LineKind.WARN if event.new is ServiceState.DEGRADED else LineKind.SYSTEM)

    @apply.register
    def _on_server_failed(self, event: ServerFailed) -> None:
        """A server over several nodes failed as one: the rank blamed speaks for it."""
        panel = self.panels.get(event.service)
        if panel is not None:
            panel.cause = event.cause
            panel.redraw(self.elapsed.now())

    @apply.register
    def _on_canary(self, event: CanaryResult) -> None:
        panel = self.panels.get(event.service)
        if panel is not None:
            panel.view.apply_canary(event)
            panel.redraw(self.elapsed.now())

    @apply.register
    def _on_pairs(self, event: PairMatrix) -> None:
        panel = self.panels.get(event.service)
        if panel is not None:
            panel.view.pairs = event
            panel.redraw(self.elapsed.now())

    @apply.register
    def _on_figures(self, event: ServingFigures) -> None:
        panel = self.panels.get(event.service)
        if panel is not None and panel.view.state in SERVING_STATES:
            panel.view.apply_figures(event)
            panel.show_figures()

    def _retry_started(self) -> None:
        self.in_progress = True
        self.plan.finish(None)
        self.elapsed.resume()
        self.ticker.resume()

    @apply.register
    def _on_lines(self, event: LogLines) -> None:
        self._append(event.service, event.lines, event.elapsed)

    def _system_line(self, service: str | None, text: str, kind: LineKind = LineKind.SYSTEM) -> None:
        """One line of pdtui's own in a service's log (a check's outcome, a notice): not a line the service said."""
        if service is not None:
            self._append(service, (LogRecord(text, kind),), None)

    def _append(self, service: str, lines: tuple[LogRecord, ...], heard: float | None) -> None:
        """Lines into a service's panel (and the log of every service, when open); ``heard``: the elapsed time the
        service's own lines came at (None for pdtui's)."""
        panel = self._owners.get(service)
        if panel is None or not lines:
            return
        panel.append(lines, service, heard)
        if panel.has_class("-folded"):
            self._relayout()
        if self.merged is not None and self.has_class("-merged"):
            self.merged.log_view.append(lines, [service] * len(lines))
            self.merged.status.show_state(self.merged.log_view)

    @apply.register
    def _on_phase(self, event: PhaseStarted) -> None:
        found = self._view(event.service)
        if found is not None:
            panel, view = found
            ended = view.apply_phase(event)
            panel.redraw(self.elapsed.now())
            if ended is not None:
                self.notify(f"{event.service}: {slower(*ended, engine=view.info.engine)}", severity="warning",
                            timeout=15, markup=False)

    @apply.register
    def _on_probe(self, event: ProbeResult) -> None:
        """Show a check's latest result under the header; log it only when its outcome changes."""
        found = self._view(event.service)
        if found is not None:
            found[1].apply_probe(event)
            found[0].redraw(self.elapsed.now())
        key = (event.service, event.check)
        if self._probes.get(key) == event.ok:
            return
        self._probes[key] = event.ok
        outcome = "ok" if event.ok else "not yet"
        latency = f" ({event.latency * 1000:.0f} ms)" if event.latency is not None else ""
        detail = f": {event.detail}" if event.detail else ""
        self._system_line(event.service, f"· check {event.check} {outcome}{latency}{detail}")

    @apply.register
    def _on_host(self, event: HostStatus) -> None:
        self.title_bar.show_host(event.host, event.status)
        severity = HOST_SEVERITY.get(event.status)
        if severity:
            self.notify(f"{event.host}: {event.detail or event.status}", severity=severity, markup=False)

    @apply.register
    def _on_unit(self, event: UnitStatus) -> None:
        found = self._view(event.service)
        if found is not None:
            found[1].apply_unit(event)
            found[0].redraw(self.elapsed.now())

    @apply.register
    def _on_job(self, event: JobStatus) -> None:
        """A job's id, state, node and GPUs on its placement line; each change of Slurm's word in its log too (a
        queued job's log has nothing else to say)."""
        panel = self.panels.get(event.service)
        if panel is not None:
            panel.placement.job = event
            reason = f" ({event.reason})" if event.reason else ""
            where = f" on {event.node}" if event.node else ""
            self._system_line(event.service, f"· job {event.job_id} {event.state}{reason}{where}")

    @apply.register
    def _on_gpus(self, event: GpuSample) -> None:
        for service, panel in self._owners.items():
            view = panel.rank(service)
            if view is not None and view.info.host == event.host and view.info.gpus:
                panel.show_gpus(service, [gpu for gpu in event.gpus if gpu.index in view.info.gpus])

    @apply.register
    def _on_notice(self, event: Notice) -> None:
        severity = NOTICE_SEVERITY.get(event.level, "information")
        self.notify(event.text, severity=severity, markup=False)
        kind = LineKind.WARN if event.level in ("warning", "error") else LineKind.SYSTEM
        self._system_line(event.service, f"· {event.text}", kind)

    @apply.register
    def _on_finding(self, event: PreflightFinding) -> None:
        self.plan.tell(event)
        self._on_notice(Notice(event.level, event.text, event.service, event.elapsed))

    @apply.register
    def _on_done(self, done: Done) -> None:
        self.done = done
        self.in_progress = False
        self.plan.finish(done)
        self.elapsed.freeze(done.elapsed)
        self.ticker.pause()   # the counters are frozen: nothing to redraw until a retry
        self._alert(done)

    # -- the end-of-bring-up alert ------------------------------------------------------

    def _alert(self, done: Done) -> None:
        """Toast, terminal bell and an OSC 9 desktop notification (through tmux when inside it)."""
        name = self._deployment or "bring-up"
        if done.ok:
            message = f"{name} is ready ({format_elapsed(done.elapsed)})"
        elif done.ready_at is not None and done.failed_at is not None:
            message = (f"{name} failed after it was ready: {', '.join(done.failures)} "
                       f"({since_ready(done.ready_at, 'failed', done.failed_at)})")
        else:
            message = f"{name} failed: {', '.join(done.failures) or 'see the panels'}"
        if self.follow_up_text:
            message = f"{message} — {self.follow_up_text}"
        self.notify(message, title="pdtui", severity="information" if done.ok else "error", markup=False)
        self.app.bell()
        self.app.write_escape(desktop_notification(f"pdtui: {message}", in_tmux="TMUX" in os.environ))

    # -- time -----------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance the elapsed times; each widget repaints only if its text changed."""
        now = self.elapsed.now()
        self.title_bar.show_elapsed(now)
        for panel in self.panels.values():
            panel.redraw(now)

    # -- keys -----------------------------------------------------------------------------

    def _focused_log(self) -> LogView | None:
        focused = self.focused
        if isinstance(focused, LogView):
            return focused
        if self.filter_bar.target is not None and self.filter_bar.display:
            return self.filter_bar.target
        if self.has_class("-merged") and self.merged is not None:
            return self.merged.log_view
        return next((panel.log_view for panel in self.panels.values()), None)

    def _focused_panel(self) -> ServicePanel | None:
        log = self._focused_log()
        return next((p for p in self.panels.values() if p.log_view is log), None)

    def _show_status(self, log: LogView) -> None:
        owner = self._focused_panel() if log is not self._merged_log() else self.merged
        if owner is not None:
            owner.status.show_state(log)

    def _merged_log(self) -> LogView | None:
        return self.merged.log_view if self.merged is not None else None

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_follow(self) -> None:
        log = self._focused_log()
        if log is None:
            return
        log.follow = not log.follow
        self._show_status(log)

    def action_filter(self) -> None:
        log = self._focused_log()
        if log is not None:
            self.filter_bar.open(log)

    def on_filter_bar_closed(self, message: FilterBar.Closed) -> None:
        self._show_status(message.target)

    def action_zoom(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        panel = self._focused_panel()
        if panel is not None:
            self.maximize(panel, container=False)

    def action_all_logs(self) -> None:
        """Toggle the merged view; it is rebuilt in time order each time it opens."""
        if self.merged is None:
            return
        if self.has_class("-merged"):
            self.remove_class("-merged")
            self._tell_shown()
            if self.panels:
                next(iter(self.panels.values())).log_view.focus()
            return
        self.minimize()
        self.merged.rebuild([list(panel.merged_rows()) for panel in self.panels.values()])
        self.add_class("-merged")
        self._tell_shown()
        self.merged.log_view.focus()

    def action_save(self) -> None:
        """The focused log as text: a download in a browser (nothing written where the server runs), else a new
        file in the working directory, readable by its owner alone."""
        log = self._focused_log()
        if log is None:
            return
        panel = self._focused_panel()
        stem = f"pdtui-{_safe_name(self._deployment)}-{_safe_name(panel.service if panel is not None else 'all')}"
        text = "".join(f"{row.saved()}\n" for row in log.rows())
        if self.app.is_web:
            self.app.deliver_text(io.StringIO(text), save_filename=f"{stem}.log", mime_type="text/plain")
            self.notify(f"sent {log.total} lines to the browser as {stem}.log", title="log saved", markup=False)
            return
        try:
            path = write_new(Path.cwd(), stem, text)     # 0600: a whole journal
        except OSError as error:
            self.notify(f"could not save {error.filename or stem}: {error.strerror}", severity="error", markup=False)
            return
        self.notify(f"saved {log.total} lines to {path}", title="log saved", markup=False)

    def _refused(self, verb: str) -> bool:
        """True (after saying so) when this screen may not act: a page served to watch only (see :data:`SIDE_EFFECTS`)."""
        if self.refuse_actions:
            self.notify(f"{verb} refused: {self.refuse_actions}", severity="warning", markup=False)
        return bool(self.refuse_actions)

    def action_retry(self) -> None:
        panel = self._focused_panel()
        if panel is None:
            self.notify("focus a service panel to retry it", severity="warning")
            return
        if not panel.lead.retryable:      # a server over several nodes: any rank failed (it stopped the others)
            self.notify(f"{panel.service} is {panel.lead.state.value}: only a failed or timed-out service can be retried",
                        severity="warning", markup=False)
            return
        if self.source.retry(panel.service):
            self.notify(f"retrying {panel.service}", markup=False)
        else:
            self.notify(f"{panel.service} cannot be retried now", severity="warning", markup=False)

    def action_pairs(self) -> None:
        """Prove every prefill × decode pair behind the serving routers again (one request each)."""
        if self.source.prove_pairs():
            self.notify("proving every prefill × decode pair")
        else:
            self.notify("no router serves: no pairs to prove", severity="warning")

    def action_restart(self) -> None:
        self._confirm_action("restart")

    def action_stop(self) -> None:
        self._confirm_action("stop")

    def _confirm_action(self, verb: str) -> None:
        """Restart or stop the focused service, once the user has seen the exact command and said yes."""
        panel = self._focused_panel()
        if panel is None:
            self.notify(f"focus a service panel to {verb} it", severity="warning")
            return
        info = panel.view.info
        after = [p.service for p in self.panels.values() if info.name in p.view.info.after]
        if verb == "restart" and after and info.role in BACKEND_ROLES:
            self._choose_restart(panel, after)
            return
        if verb == "restart":
            consequence = (f"{', '.join(after)} will wait for it and be proven again." if after
                           else "pdtui waits until it is ready again.")
            command = info.restart_command
        else:
            drained = " It is taken out of its routers first (drained)." if after and info.role in BACKEND_ROLES else ""
            consequence = f"pdtui waits until it is inactive and its GPUs' memory is released.{drained}"
            command = info.stop_command
        what = f"{verb.capitalize()} {info.name} ({info.unit})"

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            act = self.source.restart if verb == "restart" else self.source.stop
            if act(info.name):
                self.notify(f"{verb} {info.name}: {command}", markup=False)
            else:
                done_word = "restarted" if verb == "restart" else "stopped"
                self.notify(f"{info.name} is {panel.view.state.value}: it cannot be {done_word} now",
                            severity="warning", markup=False)

        self.app.push_screen(ConfirmScreen(what, command, info.host, consequence), callback=answered)

    def _choose_restart(self, panel: ServicePanel, routers: list[str]) -> None:
        """A backend a router sends requests to: drained (the routers serve on), its role rolled, or at once."""
        info = panel.view.info
        where, keeps = ", ".join(routers), "keeps" if len(routers) == 1 else "keep"
        role = [p.service for p in self.panels.values() if p.view.info.role == info.role]
        choices = {RestartHow.DRAIN: f"out of {where}, its requests finished, restarted, proven, back in; {where} "
                                     f"{keeps} serving",
                   RestartHow.NOW: f"restarted at once; {where} {keeps} sending it requests until its health "
                                   f"checks notice"}
        if len(role) > 1:
            choices[RestartHow.ROLLING] = (f"each {info.role} in turn ({', '.join(role)}), {info.name} first, each "
                                           f"drained and back before the next")

        def chosen(how: RestartHow | None) -> None:
            if how is None:
                return
            if self.source.restart(info.name, how):
                self.notify(f"restart {info.name} ({how.value}): {info.restart_command}", markup=False)
            else:
                self.notify(f"{info.name} is {panel.view.state.value}: it cannot be restarted now",
                            severity="warning", markup=False)

        self.app.push_screen(RestartScreen(f"Restart {info.name} ({info.unit})", info.restart_command, info.host,
                                           choices), callback=chosen)

    # -- quitting -------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Quit: asked first while a bring-up is under way (the screen lists what stays running)."""
        if self.in_progress:
            self.app.push_screen(QuitScreen(self._started_units()), callback=self._confirmed_quit)
        else:
            await self._leave()

    async def _confirmed_quit(self, quit: bool | None) -> None:
        if quit:
            await self._leave()

    async def _leave(self) -> None:
        code = EXIT_INTERRUPTED if self.in_progress or self.done is None else self.done.exit_code
        await self.app.leave(code, self.left_running())

    def _started_units(self) -> list[str]:
        """Units pdtui started in this session, in plan order (a server's over several nodes each with its host)."""
        units = [f"{view.info.unit} on {view.info.host}" if panel.wide else view.info.unit
                 for panel in self.panels.values() for view in panel.ranks if view.started]
        if self.done is not None:
            units += [unit for unit in self.done.left_running if unit not in units]
        return units

    def left_running(self) -> list[str]:
        """What quitting leaves running: the engine's word after Done, else every unit started."""
        if self.done is not None and not self.in_progress:
            return list(self.done.left_running)
        return self._started_units()

    def system_commands(self) -> Iterator[SystemCommand]:
        """The screen's actions in the command palette."""
        yield SystemCommand("Follow / pause", "Follow the focused log or hold it where it is", self.action_follow)
        yield SystemCommand("Filter", "Filter the focused log by a regular expression", self.action_filter)
        yield SystemCommand("Zoom", "Zoom the focused panel to the whole screen, and back", self.action_zoom)
        yield SystemCommand("Retry", "Retry the focused service when it failed or timed out", self.action_retry)
        yield SystemCommand("Prove pairs", "Prove every prefill × decode pair again (one request each)",
                            self.action_pairs)
        yield SystemCommand("Restart service", "Restart the focused service (asks first)", self.action_restart)
        yield SystemCommand("Stop service", "Stop the focused service (asks first)", self.action_stop)
        yield SystemCommand("All logs", "Every service's log merged by time", self.action_all_logs)
        yield SystemCommand("Save log", "Save the focused log to a file (in a browser: a download)", self.action_save)
        yield SystemCommand("Help", "Keys and badges", self.action_help)


def _gated(name: str, words: str) -> None:
    """Wrap ``DeploymentScreen.action_NAME`` so that a page served to watch refuses it, saying ``words``."""
    action = getattr(DeploymentScreen, f"action_{name}")

    @functools.wraps(action)
    def gate(self: DeploymentScreen) -> None:
        if not self._refused(words):
            action(self)

    setattr(DeploymentScreen, f"action_{name}", gate)


for _name, _words in SIDE_EFFECTS.items():
    _gated(_name, _words)


def write_new(directory: Path, stem: str, text: str) -> Path:
    """``text`` in a new file ``STEM.log`` (``STEM-N.log`` when taken) in ``directory``, created 0600 exclusively and
    never through a symbolic link: a file already there, or a link planted under the name, is never written."""
    for counter in range(SAVE_ATTEMPTS):
        path = directory / (f"{stem}.log" if counter == 0 else f"{stem}-{counter}.log")
        try:
            create_private(path, text)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(17, f"{SAVE_ATTEMPTS} saved logs already", str(directory / f"{stem}.log"))
