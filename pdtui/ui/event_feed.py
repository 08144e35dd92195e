"""The engine's events as the deployment's screen shows them: each kind to the widget that shows it.

A service's state, phases, checks, figures and lines go to its panel (ui/service_board.py), the steps and the verdict
to the plan strip, the hosts to the title bar; what the user must hear of at once is a toast too, and the bring-up's
end rings the bell and sends a desktop notification. The bring-up's course (under way, ended) is the screen's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import singledispatchmethod
from typing import TYPE_CHECKING

from textual.notifications import SeverityLevel

from pdtui.config.fields import format_elapsed
from pdtui.engine.events import (
    CanaryResult,
    Done,
    Event,
    HostStatus,
    JobStatus,
    LineKind,
    LogLines,
    Notice,
    PairMatrix,
    PhaseStarted,
    PlanReady,
    PreflightFinding,
    ProbeResult,
    ServerFailed,
    ServingFigures,
    StateChanged,
    StepChanged,
    UnitStatus,
)
from pdtui.engine.states import SERVING_STATES, ServiceState
from pdtui.faces.outcome import since_ready
from pdtui.faces.timeline import slower
from pdtui.gpus.sampler import GpuSample
from pdtui.ui.model import ServiceView
from pdtui.ui.notify import desktop_notification

if TYPE_CHECKING:
    from pdtui.ui.deployment_screen import DeploymentScreen

HOST_SEVERITY: dict[str, SeverityLevel] = {"error": "error", "unreachable": "warning"}
NOTICE_SEVERITY: dict[str, SeverityLevel] = {"warning": "warning", "error": "error"}


class EventFeed:
    """Shows each engine event on the screen's widgets; remembers only each check's last outcome (a check's line
    in its log is written when the outcome changes)."""

    def __init__(self, screen: DeploymentScreen) -> None:
        self.screen = screen
        self.board = screen.board
        self.elapsed = screen.elapsed
        self._probes: dict[tuple[str, str], bool] = {}

    @singledispatchmethod
    def apply(self, event: Event) -> None:
        """Show one engine event: each kind to its own handler, registered below by the type it takes."""

    @apply.register
    def _on_plan(self, plan: PlanReady) -> None:
        screen = self.screen
        screen.title_bar.show_deployment(plan.deployment, plan.config)
        screen.title_bar.activity = "bring-up" if plan.title == "bringing up" else plan.title
        screen.plan.set_steps(plan.steps)
        self.board.build(plan)
        first = self.board.first_log()
        if first is not None:
            screen.call_after_refresh(first.focus)
        screen.call_after_refresh(screen.app.collector.settle)   # the screen is built: its objects stay

    @apply.register
    def _on_step(self, event: StepChanged) -> None:
        self.screen.plan.apply(event)

    @apply.register
    def _on_state(self, event: StateChanged) -> None:
        found = self.board.view(event.service)
        if found is None:
            return
        panel, view = found
        self.screen.plan.follow(event)
        if not self.screen.in_progress and not event.new.is_final:
            self.screen.retried()
        serving = panel.view.figures is not None
        view.apply(event)
        panel.redraw(self.elapsed.now())
        if panel.idle != panel.has_class("-folded"):
            self.board.relayout()
        if serving and panel.view.figures is None:
            panel.show_figures()
        if ServiceState.DEGRADED in (event.new, event.old) and event.new in SERVING_STATES:
            self._canary_verdict(event)

    def _canary_verdict(self, event: StateChanged) -> None:
        """A ready router degraded (toast and bell: serving is failing), or serves again."""
        if event.new is ServiceState.DEGRADED:
            self.screen.notify(f"{event.service} degraded: {event.reason}", severity="error", timeout=20,
                               markup=False)
            self.screen.app.bell()
        else:
            self.screen.notify(f"{event.service} ready again: {event.reason}", markup=False)
        self.board.system_line(event.service, f"· {event.service} {event.new.value}: {event.reason}",
                               LineKind.WARN if event.new is ServiceState.DEGRADED else LineKind.SYSTEM)

    @apply.register
    def _on_server_failed(self, event: ServerFailed) -> None:
        """A server over several nodes failed as one: the rank blamed speaks for it."""
        panel = self.board.panels.get(event.service)
        if panel is not None:
            panel.cause = event.cause
            panel.redraw(self.elapsed.now())

    @apply.register
    def _on_canary(self, event: CanaryResult) -> None:
        panel = self.board.panels.get(event.service)
        if panel is not None:
            panel.view.apply_canary(event)
            panel.redraw(self.elapsed.now())

    @apply.register
    def _on_pairs(self, event: PairMatrix) -> None:
        panel = self.board.panels.get(event.service)
        if panel is not None:
            panel.view.pairs = event
            panel.redraw(self.elapsed.now())

    @apply.register
    def _on_figures(self, event: ServingFigures) -> None:
        panel = self.board.panels.get(event.service)
        if panel is not None and panel.view.state in SERVING_STATES:
            panel.view.apply_figures(event)
            panel.show_figures()

    @apply.register
    def _on_lines(self, event: LogLines) -> None:
        self.board.append(event.service, event.lines, event.elapsed)

    @apply.register
    def _on_phase(self, event: PhaseStarted) -> None:
        found = self.board.view(event.service)
        if found is not None:
            panel, view = found
            ended = view.apply_phase(event)
            panel.redraw(self.elapsed.now())
            if ended is not None:
                self.screen.notify(f"{event.service}: {slower(*ended, engine=view.info.engine)}", severity="warning",
                                   timeout=15, markup=False)

    @apply.register
    def _on_probe(self, event: ProbeResult) -> None:
        """Show a check's latest result under the header; log it only when its outcome changes."""
        self._change(event.service, lambda view: view.apply_probe(event))
        key = (event.service, event.check)
        if self._probes.get(key) == event.ok:
            return
        self._probes[key] = event.ok
        outcome = "ok" if event.ok else "not yet"
        latency = f" ({event.latency * 1000:.0f} ms)" if event.latency is not None else ""
        detail = f": {event.detail}" if event.detail else ""
        self.board.system_line(event.service, f"· check {event.check} {outcome}{latency}{detail}")

    @apply.register
    def _on_host(self, event: HostStatus) -> None:
        self.screen.title_bar.show_host(event.host, event.status)
        severity = HOST_SEVERITY.get(event.status)
        if severity:
            self.screen.notify(f"{event.host}: {event.detail or event.status}", severity=severity, markup=False)

    @apply.register
    def _on_unit(self, event: UnitStatus) -> None:
        self._change(event.service, lambda view: view.apply_unit(event))

    def _change(self, service: str, change: Callable[[ServiceView], None]) -> None:
        """``change`` a service's view (a rank's own, in its server's panel), then redraw the panel it is in."""
        found = self.board.view(service)
        if found is not None:
            change(found[1])
            found[0].redraw(self.elapsed.now())

    @apply.register
    def _on_job(self, event: JobStatus) -> None:
        """A job's id, state, node and GPUs on its placement line; each change of Slurm's word in its log too (a
        queued job's log has nothing else to say)."""
        panel = self.board.panels.get(event.service)
        if panel is not None:
            panel.placement.job = event
            reason = f" ({event.reason})" if event.reason else ""
            where = f" on {event.node}" if event.node else ""
            self.board.system_line(event.service, f"· job {event.job_id} {event.state}{reason}{where}")

    @apply.register
    def _on_gpus(self, event: GpuSample) -> None:
        self.board.show_gpus(event)

    @apply.register
    def _on_notice(self, event: Notice) -> None:
        severity = NOTICE_SEVERITY.get(event.level, "information")
        self.screen.notify(event.text, severity=severity, markup=False)
        kind = LineKind.WARN if event.level in ("warning", "error") else LineKind.SYSTEM
        self.board.system_line(event.service, f"· {event.text}", kind)

    @apply.register
    def _on_finding(self, event: PreflightFinding) -> None:
        self.screen.plan.tell(event)
        self._on_notice(Notice(event.level, event.text, event.service, event.elapsed))

    @apply.register
    def _on_done(self, done: Done) -> None:
        self.screen.ended(done)
        self._alert(done)

    def _alert(self, done: Done) -> None:
        """Toast, terminal bell and an OSC 9 desktop notification (through tmux when inside it)."""
        message = outcome_message(self.board.deployment or "bring-up", done)
        if self.screen.follow_up_text:
            message = f"{message} — {self.screen.follow_up_text}"
        self.screen.notify(message, title="pdtui", severity="information" if done.ok else "error", markup=False)
        self.screen.app.bell()
        self.screen.app.write_escape(desktop_notification(f"pdtui: {message}", in_tmux="TMUX" in os.environ))


def outcome_message(name: str, done: Done) -> str:
    """How the bring-up of deployment ``name`` ended, in one line: ready in how long, or what failed."""
    if done.ok:
        return f"{name} is ready ({format_elapsed(done.elapsed)})"
    if done.ready_at is not None and done.failed_at is not None:
        return (f"{name} failed after it was ready: {', '.join(done.failures)} "
                f"({since_ready(done.ready_at, 'failed', done.failed_at)})")
    return f"{name} failed: {', '.join(done.failures) or 'see the panels'}"
