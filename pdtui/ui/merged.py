"""All services at once: every service's lines interleaved by journal time, tagged by service."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from pdtui.ui.logview import MAX_TAG_WIDTH, LogView, Row
from pdtui.ui.panel import LogStatus


def _keyed(rows: Iterable[Row], order: int) -> Iterator[tuple[float, int, int, Row]]:
    """Key each row by its timestamp, carrying the last known one over lines that have none.

    ``order`` (the service's position) and the running index keep the merge stable:
    lines with equal times stay in journal order, services in plan order.
    """
    last = float("-inf")
    for index, row in enumerate(rows):
        if row.timestamp is not None:
            last = row.timestamp
        yield last, order, index, row


def merge_by_time(streams: list[Iterable[Row]]) -> list[Row]:
    """Interleave per-service rows (each already in journal order) by timestamp."""
    keyed = [_keyed(rows, order) for order, rows in enumerate(streams)]
    return [item[3] for item in heapq.merge(*keyed)]


class MergedPane(Vertical):
    """The ``a`` view: one log of every service, rebuilt in time order each time it opens."""

    ALLOW_MAXIMIZE = False

    def __init__(self, services: list[str], *, log_limit: int) -> None:
        super().__init__(id="merged")
        tag_width = min(MAX_TAG_WIDTH, max((len(name) for name in services), default=4))
        self.log_view = LogView(log_limit, tag_width=tag_width, id="merged-log")
        self.status = LogStatus(classes="log-status")

    def compose(self) -> ComposeResult:
        yield Static(Text("all services · interleaved by time", no_wrap=True), classes="merged-title")
        yield self.status
        yield self.log_view

    def rebuild(self, streams: list[Iterable[Row]]) -> None:
        """Replace the content with ``streams`` merged by time, keeping the current filter."""
        self.log_view.clear()
        rows = merge_by_time(streams)
        self.log_view.append(rows, (row.tag for row in rows))
        self.status.show_state(self.log_view)
