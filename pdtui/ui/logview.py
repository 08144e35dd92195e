"""A journal tail that stays fast while a backend logs thousands of lines a second.

It is a Line-API scroll view: lines live in a bounded buffer, a batch is appended
with one refresh, only the rows on screen are turned into strips, and strips are
cached.  Every line is drawn from :func:`pdtui.text.inert` text as plain segments
(never markup), so a hostile line shows as characters.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from pdtui.engine.events import LineKind, LogRecord
from pdtui.text import inert, make_visible

KIND_COMPONENTS: dict[LineKind, str] = {
    LineKind.READY: "logview--ready",
    LineKind.FAIL: "logview--fail",
    LineKind.WARN: "logview--warn",
    LineKind.SYSTEM: "logview--system",
}


class Row:
    """One line as the view keeps it: the journal record, tagged with its service in the merged view.

    Its drawable text is made on first use: a buffer keeps 10,000 lines but only the
    few on screen (or tested by a filter) are ever drawn, so appending stays O(1) per line.
    """

    __slots__ = ("record", "tag", "_text")

    def __init__(self, record: LogRecord, tag: str = "") -> None:
        self.record = record
        self.tag = tag
        self._text: str | None = None

    @property
    def text(self) -> str:
        """Inert and capped: safe to draw and to match a filter against."""
        if self._text is None:
            self._text = inert(self.record.text)
        return self._text

    @property
    def kind(self) -> LineKind:
        return self.record.kind

    @property
    def raw(self) -> str:
        return self.record.text

    @property
    def timestamp(self) -> float | None:
        return self.record.timestamp

    def saved(self) -> str:
        """The full line for a saved file: never capped, controls still made visible."""
        prefix = f"{self.tag}\t" if self.tag else ""
        return prefix + make_visible(self.raw)


class LogView(ScrollView, can_focus=True):
    """A bounded, filterable, follow-or-pause log of :class:`Row` lines."""

    COMPONENT_CLASSES = {*KIND_COMPONENTS.values(), "logview--tag"}

    DEFAULT_CSS = """
    LogView {
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
    }
    """

    follow: reactive[bool] = reactive(True)
    """Keep the newest line in view; when False the view holds its position as lines arrive."""

    def __init__(self, limit: int = 10_000, *, tag_width: int = 0, id: str | None = None) -> None:
        super().__init__(id=id)
        self.limit = max(1, limit)
        self.tag_width = tag_width
        self._rows: list[Row] = []
        self._base = 0        # sequence number of self._rows[0]
        self._next = 0        # sequence number the next appended row gets
        self._pattern: re.Pattern[str] | None = None
        self._matches: list[int] = []
        self._cache: LRUCache[tuple[int, int], Strip] = LRUCache(1024)

    # -- the buffer ---------------------------------------------------------------

    @property
    def first_seq(self) -> int:
        """Sequence number of the oldest line still kept."""
        return max(self._base, self._next - self.limit)

    @property
    def total(self) -> int:
        """Lines kept (filtered or not)."""
        return self._next - self.first_seq

    @property
    def row_count(self) -> int:
        """Rows shown: the lines that pass the filter."""
        if self._pattern is None:
            return self.total
        return len(self._matches) - bisect_left(self._matches, self.first_seq)

    @property
    def pattern(self) -> re.Pattern[str] | None:
        return self._pattern

    def rows(self) -> Iterator[Row]:
        """Every kept line, oldest first (unfiltered)."""
        return iter(self._rows[self.first_seq - self._base:])

    def visible_rows(self) -> Iterator[Row]:
        """The rows that pass the filter, oldest first."""
        return (self._row_at(index) for index in range(self.row_count))

    def append(self, rows: Iterable[Row]) -> None:
        """Add a batch of lines with a single refresh."""
        batch = list(rows)[-self.limit:]
        if not batch:
            return
        before = self.row_count
        start = self._next
        self._rows.extend(batch)
        self._next += len(batch)
        added = len(batch)
        if self._pattern is not None:
            search = self._pattern.search
            matched = [start + i for i, row in enumerate(batch) if search(row.text)]
            self._matches.extend(matched)
            added = len(matched)
        dropped = before + added - self.row_count
        self._trim()
        self._refit(dropped)

    def _trim(self) -> None:
        """Forget dropped lines once they are as many as the limit: amortised O(1) per line."""
        first = self.first_seq
        if first - self._base >= self.limit:
            del self._rows[: first - self._base]
            self._base = first
            del self._matches[: bisect_left(self._matches, first)]
            self._cache.clear()

    def clear(self) -> None:
        """Forget every line (the filter stays)."""
        self._rows.clear()
        self._matches.clear()
        self._base = self._next
        self._cache.clear()
        self._refit(0)

    def set_filter(self, pattern: re.Pattern[str] | None) -> None:
        """Show only lines matching ``pattern`` (None: every line)."""
        self._pattern = pattern
        first = self.first_seq
        self._matches = (
            [first + i for i, row in enumerate(self.rows()) if pattern.search(row.text)]
            if pattern is not None
            else []
        )
        self._cache.clear()
        self.virtual_size = Size(self.size.width, self.row_count)
        self.scroll_to(y=self.max_scroll_y if self.follow else 0, animate=False)
        self.refresh()

    def _refit(self, dropped: int) -> None:
        """Resize the virtual area; follow the end, or keep the rows in view where they were."""
        self._grow(Size(self.size.width, self.row_count))
        # force: Textual allows scrolling only once a layout has shown the scrollbar
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
        elif dropped > 0:
            self.scroll_to(y=max(0, self.scroll_y - dropped), animate=False, immediate=True, force=True)
        self.refresh()

    def _grow(self, size: Size) -> None:
        """Set the virtual size, laying the screen out only when the scrollbar appears or goes.

        ``virtual_size`` is a layout reactive: setting it re-lays out and repaints the
        whole screen, 20-50 ms, for every batch of lines.  While the scrollbar stays as
        it is, only this view and its scrollbar change, so they are updated directly.
        """
        height = self.container_size.height
        if not self.is_mounted or (self.virtual_size.height > height) != (size.height > height):
            self.virtual_size = size
            return
        self.set_reactive(LogView.virtual_size, size)
        if self.show_vertical_scrollbar:
            self.vertical_scrollbar.window_virtual_size = size.height

    # -- follow -------------------------------------------------------------------

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.scroll_end(animate=False, x_axis=False)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, self.row_count)
        self._cache.clear()
        if self.follow:
            self.scroll_end(animate=False, x_axis=False)

    # -- drawing ------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def _seq_at(self, index: int) -> int:
        if self._pattern is None:
            return self.first_seq + index
        return self._matches[bisect_left(self._matches, self.first_seq) + index]

    def _row_at(self, index: int) -> Row:
        return self._rows[self._seq_at(index) - self._base]

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        if index >= self.row_count:
            return Strip.blank(width, self.rich_style)
        seq = self._seq_at(index)
        key = (seq, width)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._render_row(self._rows[seq - self._base], width)
            self._cache[key] = strip
        return strip.apply_offsets(0, index)

    def _render_row(self, row: Row, width: int) -> Strip:
        """Segments straight from the row's inert text: no ``Text`` to build and render per line."""
        base = self.rich_style
        pieces: list[tuple[str, Style]] = []
        if self.tag_width:
            tag = row.tag[: self.tag_width].ljust(self.tag_width)
            pieces.append((f"{tag} │ ", base + self._component_style("logview--tag")))
        component = KIND_COMPONENTS.get(row.kind)
        pieces.append((row.text, base + self._component_style(component) if component else base))
        return Strip(_fit(pieces, width, base), max(0, width))

    def _component_style(self, name: str) -> Style:
        return self.get_component_rich_style(name, partial=True)


def _fit(pieces: list[tuple[str, Style]], width: int, pad: Style) -> list[Segment]:
    """Exactly ``width`` cells: cut with an ellipsis when too long (as ``Text.truncate`` does), else padded."""
    if width <= 0:
        return []
    total = sum(cell_len(text) for text, _ in pieces)
    if total <= width:
        segments = [Segment(text, style) for text, style in pieces]
        if total < width:
            segments.append(Segment(" " * (width - total), pad))
        return segments
    segments, room = [], width - 1
    for text, style in pieces:
        cells = cell_len(text)
        if cells > room:
            segments.append(Segment(set_cell_size(text, room) + "…", style))
            break
        segments.append(Segment(text, style))
        room -= cells
    return segments
