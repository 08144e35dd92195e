"""The top of the screen: title bar with total elapsed time, and the plan strip with the verdict."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from pdtui.engine.events import Done, Step, StepChanged, StepStatus
from pdtui.text import inert
from pdtui.ui.format import duration

STEP_ICONS: dict[StepStatus, str] = {
    StepStatus.PENDING: "○",
    StepStatus.RUNNING: "◐",
    StepStatus.DONE: "✓",
    StepStatus.FAILED: "✗",
    StepStatus.SKIPPED: "⊘",
}


class TitleBar(Widget):
    """``pdtui · DEPLOYMENT`` on the left, host trouble and ``bring-up m:ss`` on the right."""

    DEFAULT_CSS = "TitleBar { height: 1; }"

    def __init__(self) -> None:
        super().__init__()
        self.deployment = ""
        self.elapsed = 0.0
        self.hosts: dict[str, str] = {}

    def show_deployment(self, name: str) -> None:
        self.deployment = name
        self.refresh()

    def show_host(self, host: str, status: str) -> None:
        if self.hosts.get(host) != status:
            self.hosts[host] = status
            self.refresh()

    def show_elapsed(self, seconds: float) -> None:
        """Repaint only when the drawn time changes (it shows whole seconds)."""
        changed = duration(seconds) != duration(self.elapsed)
        self.elapsed = seconds
        if changed:
            self.refresh()

    def render(self) -> Text:
        left = Text.assemble(("pdtui", "bold"), f" · {self.deployment}" if self.deployment else "")
        troubled = [f"{host}: {status}" for host, status in self.hosts.items() if status != "connected"]
        right = Text("  ".join([*troubled, f"bring-up {duration(self.elapsed)}"]))
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

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[Step] = []
        self.status: dict[Step, StepStatus] = {}
        self.detail = ""
        self.done: Done | None = None

    def set_steps(self, steps: tuple[Step, ...]) -> None:
        self.steps = list(steps)
        self.status = {step: StepStatus.PENDING for step in steps}
        self.refresh(layout=True)

    def apply(self, event: StepChanged) -> None:
        if event.step not in self.status:
            self.steps.append(event.step)
        self.status[event.step] = event.status
        self.detail = inert(event.detail) if event.detail else ""
        self.refresh(layout=True)

    def finish(self, done: Done | None) -> None:
        """Show ``done``'s verdict (None: a retry is running, hide the old verdict)."""
        self.done = done
        self.refresh(layout=True)

    def render(self) -> Text:
        width = self.size.width or 120
        lines = [self._steps_line(width)]
        second = self._verdict() if self.done is not None else self._detail()
        if second.plain:
            lines.append(second)
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return Text("\n", no_wrap=True).join(lines)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"planstrip--{name}", partial=True)

    def _steps_line(self, width: int) -> Text:
        """Every step with its icon; shorter separators, then icons only, when space runs out."""
        for separator in (" ── ", " ─ ", " "):
            line = Text(no_wrap=True)
            for index, step in enumerate(self.steps):
                status = self.status[step]
                if index:
                    line.append(separator, self._style("pending"))
                line.append(f"{STEP_ICONS[status]} {step.value}", self._style(status.value))
            if line.cell_len <= width:
                return line
        return self._compact_steps()

    def _compact_steps(self) -> Text:
        """Icons only, then the name of the step that matters now (running or failed)."""
        line = Text(no_wrap=True)
        for step in self.steps:
            status = self.status[step]
            line.append(STEP_ICONS[status], self._style(status.value))
        current = next(
            (s for s in self.steps if self.status[s] in (StepStatus.FAILED, StepStatus.RUNNING)),
            None,
        )
        if current is not None:
            line.append(f" {current.value}", self._style(self.status[current].value))
        return line

    def _detail(self) -> Text:
        return Text(self.detail, self._style("detail"), no_wrap=True)

    def _verdict(self) -> Text:
        """``✓ ready in 1:23 — prefill 0:41 · decode 0:47`` or the failures, then the ready times."""
        done = self.done
        assert done is not None
        ready = [f"{name} {duration(seconds)}" for name, seconds in done.time_to_ready.items()]
        if done.ok:
            head = Text(f"✓ ready in {duration(done.elapsed)}", self._style("ok"))
            tail = " · ".join(ready)
        else:
            head = Text(f"✗ failed after {duration(done.elapsed)}", self._style("bad"))
            failures = [f"{name}: {inert(reason)}" for name, reason in done.failures.items()]
            tail = " · ".join([*failures, *(f"{item} ready" for item in ready)])
        return Text.assemble(head, f" — {tail}" if tail else "", no_wrap=True)
