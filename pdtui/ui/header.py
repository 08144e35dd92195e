"""The top of the screen: title bar with total elapsed time, and the plan strip with the verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from pdtui.config.fields import format_elapsed
from pdtui.engine.events import Done, PreflightFinding, StateChanged, Step, StepChanged, StepStatus
from pdtui.engine.states import FINAL_STATES, SERVING_STATES, ServiceState
from pdtui.faces.outcome import since_ready
from pdtui.support.text import inert

MAX_FINDINGS = 4      # lines of findings under the steps; more are counted ("and N more")
MIN_CONFIG_CELLS = 12  # the title bar shows the config's path cut to no fewer cells, or not at all

STEP_ICONS: dict[StepStatus, str] = {
    StepStatus.PENDING: "○",
    StepStatus.RUNNING: "◐",
    StepStatus.DONE: "✓",
    StepStatus.FAILED: "✗",
    StepStatus.SKIPPED: "⊘",
}


class TitleBar(Widget):
    """``pdtui · DEPLOYMENT  CONFIG`` on the left, host trouble and ``bring-up m:ss`` on the right.

    The config file is the one the deployment was read from (as named or found): what the screen acts on. When the
    line is too short for all, the config's path is cut from its start, then left out.

    It repaints when what it shows changes, and only then: the elapsed time is kept as
    the whole seconds it draws, so a tick within the same second changes nothing.
    """

    DEFAULT_CSS = "TitleBar { height: 1; }"
    COMPONENT_CLASSES = {"titlebar--config"}

    deployment: reactive[str] = reactive("")
    config: reactive[str] = reactive("")
    """The config file's path, inert."""
    trouble: reactive[str] = reactive("")
    """The hosts that are not connected, with their status."""
    shown_elapsed: reactive[str] = reactive(format_elapsed(0))
    activity: reactive[str] = reactive("bring-up")
    """What the screen does: ``bring-up``, ``watching``, ``restarting decode``, ``taking down``."""

    def __init__(self) -> None:
        super().__init__()
        self.elapsed = 0.0
        self.hosts: dict[str, str] = {}

    def show_deployment(self, name: str, config: str = "") -> None:
        self.deployment = name
        self.config = inert(config)

    def show_host(self, host: str, status: str) -> None:
        self.hosts[host] = status
        self.trouble = "  ".join(f"{name}: {state}" for name, state in self.hosts.items() if state != "connected")

    def show_elapsed(self, seconds: float) -> None:
        self.elapsed = seconds
        self.shown_elapsed = format_elapsed(seconds)

    def render(self) -> Text:
        left = Text.assemble(("pdtui", "bold"), f" · {self.deployment}" if self.deployment else "")
        right = Text("  ".join(part for part in (self.trouble, f"{self.activity} {self.shown_elapsed}") if part))
        room = self.size.width - left.cell_len - right.cell_len - 3
        if self.config and room >= MIN_CONFIG_CELLS:
            config = self.config if len(self.config) <= room else "…" + self.config[len(self.config) - room + 1:]
            left.append(f"  {config}", self.get_component_rich_style("titlebar--config", partial=True))
        gap = max(1, self.size.width - left.cell_len - right.cell_len)
        line = Text.assemble(left, " " * gap, right)
        line.truncate(self.size.width, overflow="ellipsis")
        return line


class PlanStrip(Widget):
    """The bring-up steps with their state, then a line for the current detail or the verdict."""

    COMPONENT_CLASSES = {f"planstrip--{status.value}" for status in StepStatus} | {
        "planstrip--ok",
        "planstrip--bad",
        "planstrip--detail",
    }
    DEFAULT_CSS = "PlanStrip { height: auto; }"

    progress: reactive[dict[Step, StepStatus]] = reactive(dict, layout=True)
    """Every step in plan order with its status; replaced, never changed in place, so that it redraws."""
    detail: reactive[str] = reactive("", layout=True)
    done: reactive[Done | None] = reactive(None, layout=True)
    """The verdict once the bring-up ended; None while it runs (again, on a retry)."""
    findings: reactive[tuple[PreflightFinding, ...]] = reactive(tuple, layout=True)
    """What the preflight found in the servers as they would run and their hosts' fabric, told under the steps."""

    def __init__(self) -> None:
        super().__init__()
        self.since_done: dict[str, StateChanged] = {}   # each service's latest change after the verdict was told
        self.degraded_since: dict[str, float] = {}      # each degraded router: when it degraded (kept across verdicts)
        self.ready_in: dict[str, float] = {}            # each service's latest time to ready, as its state told it

    def set_steps(self, steps: tuple[Step, ...]) -> None:
        self.progress = dict.fromkeys(steps, StepStatus.PENDING)

    def follow(self, event: StateChanged) -> None:
        """A service's new state: a verdict shown already is told again as the services are now."""
        if event.new is ServiceState.DEGRADED:
            self.degraded_since.setdefault(event.service, event.elapsed)
        else:
            self.degraded_since.pop(event.service, None)
        if event.time_to_ready is not None:
            self.ready_in[event.service] = event.time_to_ready
        if self.done is not None:
            self.since_done[event.service] = event
            self.refresh(layout=True)

    def apply(self, event: StepChanged) -> None:
        if event.step is Step.PREFLIGHT and event.status is StepStatus.RUNNING:
            self.findings = ()        # a preflight again (a retry) tells its findings again
        self.progress = {**self.progress, event.step: event.status}
        self.detail = inert(event.detail) if event.detail else ""

    def tell(self, finding: PreflightFinding) -> None:
        self.findings = (*self.findings, finding)

    def finish(self, done: Done | None) -> None:
        """Show ``done``'s verdict (None: a retry is running, hide the old verdict)."""
        self.done, self.since_done = done, {}

    def render(self) -> Text:
        width = self.size.width or 120
        lines = [self._steps_line(width)]
        second = self._verdict() if self.done is not None else self._detail()
        if second.plain:
            lines.append(second)
        lines += self._findings()
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return Text("\n", no_wrap=True).join(lines)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"planstrip--{name}", partial=True)

    def _steps_line(self, width: int) -> Text:
        """Every step with its icon; shorter separators, then icons only, when space runs out."""
        for separator in (" ── ", " ─ ", " "):
            line = Text(no_wrap=True)
            for index, (step, status) in enumerate(self.progress.items()):
                if index:
                    line.append(separator, self._style("pending"))
                line.append(f"{STEP_ICONS[status]} {step.value}", self._style(status.value))
            if line.cell_len <= width:
                return line
        return self._compact_steps()

    def _compact_steps(self) -> Text:
        """Icons only, then the name of the step that matters now (running or failed)."""
        line = Text(no_wrap=True)
        for status in self.progress.values():
            line.append(STEP_ICONS[status], self._style(status.value))
        current = next(
            ((step, status) for step, status in self.progress.items() if status in (StepStatus.FAILED, StepStatus.RUNNING)),
            None,
        )
        if current is not None:
            step, status = current
            line.append(f" {step.value}", self._style(status.value))
        return line

    def _findings(self) -> list[Text]:
        """The preflight's findings, a line each, refusals first: all of them while they matter (the bring-up runs
        or failed), one line counting them once it is ready."""
        found = sorted(self.findings, key=lambda f: f.level != "error")
        if not found:
            return []
        if self.done is not None and self.done.ok:
            # ready despite a refusal: --force started it
            return [Text(f"preflight: {_count(found, forced=True)} (in the panels)", self._style("detail"),
                         no_wrap=True)]
        shown = found if len(found) <= MAX_FINDINGS else found[:MAX_FINDINGS - 1]
        lines = [Text.assemble(("✗ " if f.level == "error" else "⚠ ", self._style("failed" if f.level == "error"
                                                                                    else "running")),
                               (inert(f.text), self._style("detail")), no_wrap=True) for f in shown]
        if len(shown) < len(found):
            lines.append(Text(f"  and {len(found) - len(shown)} more (in the panels)", self._style("detail")))
        return lines

    def _detail(self) -> Text:
        return Text(self.detail, self._style("detail"), no_wrap=True)

    def _verdict(self) -> Text:
        """``✓ ready in 1:23 — prefill 0:41 · decode 0:47``, or the failures, then what is still undecided, then
        the ready times: as the services are now (a prefill ready after the outcome was told says so). A deployment
        that was ready and failed or degraded since says when each came: ``✗ ready at 1:34 · failed 2:12 later, at
        3:46 — decode: …``; the steps above keep the bring-up as it went."""
        done = self.done
        assert done is not None
        now = self._as_now(done)
        times = [f"{name} {format_elapsed(seconds)}" for name, seconds in now.ready.items()]
        head, well = self._head(done, now)
        if well:
            tail = " · ".join(times)
        else:
            tail = " · ".join([*(f"{name}: {inert(reason)}" for name, reason in now.failures.items()),
                               *(f"{name} degraded: {inert(reason)}" for name, reason in now.degraded.items()),
                               *(f"{name} not started" for name in done.blocked if name not in self.since_done),
                               *(f"{name} {_undecided(self.since_done.get(name))}" for name in now.waiting),
                               *(f"{item} ready" for item in times)])
        return Text.assemble(head, f" — {tail}" if tail else "", no_wrap=True)

    def _head(self, done: Done, now: _Now) -> tuple[Text, bool]:
        """The verdict's first words, and whether all is well (then only the ready times follow them)."""
        after = self._after_ready(done, now)
        if after is not None:
            return after
        if done.ok:
            return Text(f"✓ ready in {format_elapsed(done.elapsed)}", self._style("ok")), True
        return Text(f"✗ failed after {format_elapsed(done.elapsed)}", self._style("bad")), False

    def _as_now(self, done: Done) -> _Now:
        """The verdict's services as they are now: the outcome told, then each change since; a router degraded
        (now) is told apart from the failures."""
        now = _Now(dict(done.time_to_ready), dict(done.failures), {}, list(done.waiting))
        for name, event in self.since_done.items():
            ready = now.ready.pop(name, None)
            now.failures.pop(name, None)
            if name in now.waiting:
                now.waiting.remove(name)
            if event.new in SERVING_STATES:     # back from degraded: its time to ready is the one told before
                known = ready if ready is not None else self.ready_in.get(name, 0.0)
                now.ready[name] = event.time_to_ready if event.time_to_ready is not None else known
            elif event.new in FINAL_STATES:
                now.failures[name] = event.reason or event.new.value
            else:
                now.waiting.append(name)
        for name in self.degraded_since:
            if name in now.failures or name in now.ready:
                told = self.since_done.get(name)
                now.ready.pop(name, None)
                now.degraded[name] = now.failures.pop(name, "") if told is None else told.reason
        return now

    def _after_ready(self, done: Done, now: _Now) -> tuple[Text, bool] | None:
        """``✗ ready at 1:34 · failed 2:12 later, at 3:46`` (or ``⚠ … degraded …``): what came after the deployment
        was ready, and when; ``✓ ready at 1:34`` once all of it is back; None when it was not ready since the steps
        last began, or nothing came after."""
        if done.ready_at is None:
            return None
        failed = [self.since_done[name].elapsed for name in now.failures if name in self.since_done]
        failed_at = done.failed_at if done.failed_at is not None else min(failed, default=None)
        if now.failures and failed_at is not None:
            return Text(f"✗ {since_ready(done.ready_at, 'failed', failed_at)}", self._style("bad")), False
        if now.degraded and not now.failures:
            degraded_at = min(self.degraded_since[name] for name in now.degraded)
            return Text(f"⚠ {since_ready(done.ready_at, 'degraded', degraded_at)}", self._style("running")), False
        if not done.ok and not (now.failures or now.waiting or done.blocked):
            return Text(f"✓ ready at {format_elapsed(done.ready_at)}", self._style("ok")), True
        return None


@dataclass
class _Now:
    """The services as the verdict tells them: ready (with their times), failed, degraded, undecided."""

    ready: dict[str, float]
    failures: dict[str, str]
    degraded: dict[str, str]
    waiting: list[str] = field(default_factory=list)


def _count(found: Sequence[PreflightFinding], *, forced: bool = False) -> str:
    """``1 refusal overridden, 2 warnings``: what the preflight found, by level."""
    errors = sum(f.level == "error" for f in found)
    warnings = len(found) - errors
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((errors, "refusal"), (warnings, "warning")) if n]
    if errors and forced:
        parts[0] += " overridden (--force)"
    return ", ".join(parts)


def _undecided(event: StateChanged | None) -> str:
    """What an undecided service is doing: ``waiting``, ``starting``, ``queued``."""
    return event.new.value.replace("_", " ") if event is not None else ServiceState.WAITING.value
