"""One panel per service: header with badge, placement and GPUs, pinned failure, journal tail."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive, var
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from pdtui.engine.events import GpuInfo, JobStatus, LogRecord, ServiceInfo
from pdtui.engine.states import ServiceState
from pdtui.faces.pair_matrix import matrix_lines
from pdtui.faces.timeline import phase_bar
from pdtui.ui.format import (
    canary_summary,
    check_summary,
    clock_only,
    figures_summary,
    gpu_gauges,
    placement,
    service_title,
)
from pdtui.ui.logview import DATES_FROM, LogView
from pdtui.ui.model import ServiceView

STATE_CLASSES = {state: f"-{state.value.replace('_', '-')}" for state in ServiceState}


class PlacementLine(Widget):
    """GPUs, NUMA node and port, plus live GPU memory gauges when samples arrive.

    Chooses the widest gauge form that fits, so a narrow pane still shows every GPU.
    """

    DEFAULT_CSS = "PlacementLine { height: auto; }"

    gpus: reactive[tuple[GpuInfo, ...]] = reactive((), layout=True)
    """The newest reading of each of the service's GPUs, in its order; the gauges' line comes with the first."""
    job: reactive[JobStatus | None] = reactive(None)
    """A Slurm job's id, state, node and GPUs, as Slurm last told them."""

    def __init__(self, info: ServiceInfo) -> None:
        super().__init__()
        self.info = info

    def show_gpus(self, gpus: list[GpuInfo]) -> None:
        """Take the newest reading of each GPU (a sample may carry only some of them)."""
        latest = {gpu.index: gpu for gpu in (*self.gpus, *gpus)}
        self.gpus = tuple(latest[index] for index in self.info.gpus if index in latest)

    def render(self) -> Text:
        width = self.size.width or 80
        where = placement(self.info, self.job)
        if not self.gpus:
            return Text(where, no_wrap=True, overflow="ellipsis")
        if self.screen.has_class("-narrow"):
            gauges = gpu_gauges(list(self.gpus), width - len(where) - 3)
            line = f"{where} · {gauges}" if len(where) + 3 + len(gauges) <= width else where
            return Text(line, no_wrap=True, overflow="ellipsis")
        return Text(f"{where}\n{gpu_gauges(list(self.gpus), width)}", no_wrap=True, overflow="ellipsis")


class LogStatus(Static):
    """One line above a log saying it is paused and/or filtered; hidden otherwise."""

    shown: var[str] = var("")
    """What the line says; set for every batch of lines, so it is drawn (and the screen laid out) only on a change."""

    def show_state(self, view: LogView) -> None:
        parts: list[str] = []
        if not view.follow:
            parts.append("⏸ paused (f follows)")
        if view.pattern is not None:
            parts.append(f"filter /{view.pattern.pattern}/ {view.row_count} of {view.total}")
        self.shown = " · ".join(parts)

    def watch_shown(self, text: str) -> None:
        self.update(Text(text, no_wrap=True, overflow="ellipsis"))
        self.display = bool(text)


class FiguresRow(Horizontal):
    """A serving server's live figures: a throughput sparkline and one line of figures; hidden until the first."""

    DEFAULT_CSS = """
    FiguresRow { height: 1; display: none; }
    FiguresRow > Sparkline { width: 12; height: 1; margin-right: 1; }
    FiguresRow > Static { width: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__(classes="figures")
        self.sparkline = Sparkline([], summary_function=max)
        self.line = Static()
        self._summary: str | None = None

    def compose(self) -> ComposeResult:
        yield self.sparkline
        yield self.line

    def show(self, view: ServiceView) -> None:
        """The newest figures, drawn only where they look different: an idle server's are the same every sample."""
        self.display = view.figures is not None
        if view.figures is None:
            return
        history = list(view.history)
        if not (_flat(history) and _flat(self.sparkline.data or [])):     # a flat line looks alike at any length
            self.sparkline.data = history
        summary = figures_summary(view.figures)
        if summary != self._summary:
            self._summary = summary
            # one line of a fixed size: drawn again without laying the screen out
            self.line.update(Text(summary, no_wrap=True, overflow="ellipsis"), layout=False)


def _flat(data: Sequence[float]) -> bool:
    """Data a sparkline draws as a flat line at its foot: two values or more, all equal."""
    return len(data) >= 2 and min(data) == max(data)


def _plain(text: Text | None) -> str | None:
    return None if text is None else text.plain


def _extent(text: Text) -> tuple[int, int]:
    """The cells a text takes: its widest line and its count of lines."""
    lines = text.plain.split("\n")
    return max(map(cell_len, lines)), len(lines)


class ServicePanel(Vertical):
    """A service's live view: title, badge, placement, pinned failure line, journal tail."""

    ALLOW_MAXIMIZE = True

    def __init__(self, info: ServiceInfo, *, log_limit: int) -> None:
        super().__init__(classes=info.role)
        self.view = ServiceView(info)
        self.log_view = LogView(log_limit, tag=info.name)
        self.placement = PlacementLine(info)
        self._badge = Static(classes="badge")
        self._phases = Static(classes="phases")
        self._checks = Static(classes="checks")
        self._pairs = Static(classes="pairs")
        self.figures = FiguresRow()
        self._pinned = Static(classes="pinned")
        self.status = LogStatus(classes="log-status")
        self._shown: dict[Static, Text | None] = {}
        self._now = 0.0
        self._state_shown: ServiceState | None = None

    @property
    def service(self) -> str:
        return self.view.info.name

    @property
    def idle(self) -> bool:
        """Nothing to show but its header lines: blocked before it logged a line (a router whose backend failed)."""
        return self.view.state is ServiceState.BLOCKED and self.log_view.total == 0

    def compose(self) -> ComposeResult:
        with Horizontal(classes="panel-header"):
            yield Static(Text(service_title(self.view.info), no_wrap=True, overflow="ellipsis"), classes="title")
            yield self._badge
        yield self.placement
        yield self._phases
        yield self._checks
        yield self._pairs
        yield self.figures
        yield self._pinned
        yield self.status
        yield self.log_view

    def on_mount(self) -> None:
        self.redraw(self._now)
        self.status.show_state(self.log_view)

    def on_resize(self) -> None:
        self.redraw(self._now)      # the pinned line's stamp is shortened in a narrow panel

    def redraw(self, now: float) -> None:
        """Update the badge, state classes and pinned line from :attr:`view` at elapsed ``now``."""
        self._now = now
        view = self.view
        self._show(self._badge, Text(view.badge(now), no_wrap=True))
        if view.state is not self._state_shown:      # each tick redraws: classes only on a change
            self._state_shown = view.state
            for state, css_class in STATE_CLASSES.items():
                self.set_class(state is view.state, css_class)
        bar = phase_bar(view.phases, view.last, view.running(now)) if view.phases else None
        self._show(self._phases, Text(bar, no_wrap=True, overflow="ellipsis") if bar else None)
        parts = [check_summary(list(view.checks.values()))] if view.checks else []
        if view.canary is not None:
            parts.append(canary_summary(view.canary, now))
        checks = " · ".join(parts) or None
        self._show(self._checks, Text(checks, no_wrap=True, overflow="ellipsis") if checks else None)
        matrix = "\n".join(matrix_lines(view.pairs.pairs, reasons=False)) if view.pairs and view.pairs.pairs else None
        self._show(self._pairs, Text(matrix, no_wrap=True, overflow="ellipsis") if matrix else None)
        if view.pinned is None:
            self._show(self._pinned, None)
        else:
            marker = {ServiceState.BLOCKED: "⊘ ", ServiceState.PENDING: "… ", ServiceState.DEGRADED: "▼ "}.get(view.state, "✗ ")
            pinned = view.pinned if self.content_size.width >= DATES_FROM else clock_only(view.pinned)
            self._show(self._pinned, Text(marker + pinned, no_wrap=True, overflow="ellipsis"))

    def _show(self, line: Static, text: Text | None) -> None:
        """Show ``text`` on ``line`` (None hides it), only if it changed.

        The screen is laid out again only when the line's extent changes (its width in cells, its count of
        lines): a layout costs the whole screen's repaint, and a badge's clock or a check's figure changes
        every few seconds.
        """
        before = self._shown.get(line)
        if line in self._shown and _plain(before) == _plain(text):
            return
        self._shown[line] = text
        line.display = text is not None
        if text is not None:
            line.update(text, layout=before is None or _extent(before) != _extent(text))

    def show_figures(self) -> None:
        """The newest serving figures (or none: it stopped serving)."""
        self.figures.show(self.view)

    def append(self, records: tuple[LogRecord, ...]) -> None:
        """Add a batch of journal lines."""
        self.log_view.append(records)
        self.status.show_state(self.log_view)
