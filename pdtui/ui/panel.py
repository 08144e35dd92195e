"""One panel per service: header with badge, placement and GPUs, pinned failure, journal tail."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive, var
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from pdtui.engine.events import JobStatus, LogRecord, ServiceInfo
from pdtui.engine.states import ServiceState
from pdtui.faces.pair_matrix import matrix_lines
from pdtui.faces.timeline import phase_bar
from pdtui.gpus.inventory import GpuInfo
from pdtui.ui.format import (
    canary_summary,
    check_summary,
    clock_only,
    figures_summary,
    gpu_gauges,
    placement,
    service_title,
)
from pdtui.ui.logview import DATES_FROM, MAX_TAG_WIDTH, LogView, Row
from pdtui.ui.model import ServiceView
from pdtui.ui.nodes import lead, node_labels, node_lines, pinned

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

    def __init__(self, info: ServiceInfo, nodes: int = 1) -> None:
        super().__init__()
        self.info = info
        self.nodes = nodes      # a server over several nodes: each node's GPUs are on its row, not here

    def show_gpus(self, gpus: list[GpuInfo]) -> None:
        """Take the newest reading of each GPU (a sample may carry only some of them)."""
        latest = {gpu.index: gpu for gpu in (*self.gpus, *gpus)}
        self.gpus = tuple(latest[index] for index in self.info.gpus if index in latest)

    def render(self) -> Text:
        width = self.size.width or 80
        where = placement(self.info, self.job, self.nodes)
        if not self.gpus or self.nodes > 1:
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
    """A service's live view: title, badge, placement, pinned failure line, journal tail.

    A server over several nodes is one panel: a row per node (its rank, host, GPUs, state and phase), its badge
    and pinned line the rank that speaks for the server (ui/nodes.py), one log of every rank's lines, each
    labelled with its node.
    """

    ALLOW_MAXIMIZE = True

    def __init__(self, info: ServiceInfo, *, log_limit: int, ranks: Sequence[ServiceInfo] = ()) -> None:
        super().__init__(classes=info.role)
        self.view = ServiceView(info)
        self.ranks = [self.view, *(ServiceView(rank) for rank in ranks)]
        """Each rank's own view, rank 0 (:attr:`view`) first; a server of one node has only its own."""
        self.cause: str | None = None       # the rank the engine blamed for its server's failure
        labels = node_labels([rank.info for rank in self.ranks]) if ranks else [info.name]
        self.labels = {rank.info.name: label for rank, label in zip(self.ranks, labels, strict=True)}
        tag_width = min(MAX_TAG_WIDTH, max(map(len, labels))) if ranks else 0
        self.log_view = LogView(log_limit, tag=labels[0], tag_width=tag_width)
        self.placement = PlacementLine(info, len(self.ranks))
        self._node_rows = Static(classes="nodes")
        self._node_gpus: dict[str, tuple[GpuInfo, ...]] = {}     # each rank's GPUs' newest reading, by its service
        self._last_lines: dict[str, float] = {}                  # when each rank's newest line came (elapsed)
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
    def wide(self) -> bool:
        """A server over several nodes."""
        return len(self.ranks) > 1

    @property
    def lead(self) -> ServiceView:
        """The view that speaks for the panel: its own, or for a server over several nodes the leading rank's."""
        return lead(self.ranks, self.cause) if self.wide else self.view

    def rank(self, service: str) -> ServiceView | None:
        """One of its ranks' views, by the rank's service."""
        return next((view for view in self.ranks if view.info.name == service), None)

    @property
    def idle(self) -> bool:
        """Nothing to show but its header lines: blocked before it logged a line (a router whose backend failed)."""
        return self.view.state is ServiceState.BLOCKED and self.log_view.total == 0

    def compose(self) -> ComposeResult:
        with Horizontal(classes="panel-header"):
            yield Static(Text(service_title(self.view.info), no_wrap=True, overflow="ellipsis"), classes="title")
            yield self._badge
        yield self.placement
        yield self._node_rows
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
        view, speaker = self.view, self.lead
        self._show(self._badge, Text(speaker.badge(now), no_wrap=True))
        if speaker.state is not self._state_shown:      # each tick redraws: classes only on a change
            self._state_shown = speaker.state
            for state, css_class in STATE_CLASSES.items():
                self.set_class(state is speaker.state, css_class)
        rows = node_lines(self.ranks, now, self._node_gpus, self._last_lines) if self.wide else None
        self._show(self._node_rows, Text(rows, no_wrap=True, overflow="ellipsis") if rows else None)
        bar = phase_bar(view.phases, view.last, view.running(now), engine=view.info.engine) if view.phases else None
        self._show(self._phases, Text(bar, no_wrap=True, overflow="ellipsis") if bar else None)
        parts = [check_summary(list(view.checks.values()))] if view.checks else []
        if view.canary is not None:
            parts.append(canary_summary(view.canary, now))
        checks = " · ".join(parts) or None
        self._show(self._checks, Text(checks, no_wrap=True, overflow="ellipsis") if checks else None)
        matrix = "\n".join(matrix_lines(view.pairs.pairs, reasons=False)) if view.pairs and view.pairs.pairs else None
        self._show(self._pairs, Text(matrix, no_wrap=True, overflow="ellipsis") if matrix else None)
        who, line = pinned(self.ranks, self.cause)
        if line is None:
            self._show(self._pinned, None)
        else:
            marker = {ServiceState.BLOCKED: "⊘ ", ServiceState.PENDING: "… ",
                      ServiceState.DEGRADED: "▼ "}.get(speaker.state, "✗ ")
            line = line if self.content_size.width >= DATES_FROM else clock_only(line)
            self._show(self._pinned, Text(marker + who + line, no_wrap=True, overflow="ellipsis"))

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

    def show_gpus(self, service: str, gpus: list[GpuInfo]) -> None:
        """The newest reading of a rank's GPUs (of them alone): on the placement line, or on its node's row."""
        if not self.wide:
            self.placement.show_gpus(gpus)
            return
        latest = {gpu.index: gpu for gpu in (*self._node_gpus.get(service, ()), *gpus)}
        view = self.rank(service)
        if view is not None:
            self._node_gpus[service] = tuple(latest[index] for index in view.info.gpus if index in latest)
            self.redraw(self._now)

    def append(self, records: tuple[LogRecord, ...], service: str = "", heard: float | None = None) -> None:
        """Add a batch of lines of ``service`` (the panel's own, or one of its ranks'): its own, which came at
        elapsed ``heard``, or pdtui's about it (``heard`` None)."""
        service = service or self.service
        if heard is not None:
            self._last_lines[service] = heard
        label = self.labels.get(service, self.log_view.tag)
        self.log_view.append(records, [label] * len(records) if self.wide else None)
        self.status.show_state(self.log_view)

    def merged_rows(self) -> Iterator[Row]:
        """Its lines for the log of every service, each tagged with its service (a rank's, for a wide server)."""
        services = {label: service for service, label in self.labels.items()}
        for row in self.log_view.rows():
            yield row._replace(tag=services.get(row.tag, row.tag)) if self.wide else row
