"""A journal tail that stays fast while a backend logs thousands of lines a second.

It is a Line-API scroll view: lines live in a bounded buffer of plain columns, a
batch is appended in O(1) per line, the view repaints at most every ``PAINT_INTERVAL``,
only the rows on screen are turned into strips, and strips are
cached.  Every line is drawn from :func:`pdtui.support.text.inert` text as plain segments
(never markup), so a hostile line shows as characters.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from math import ceil
from time import monotonic
from typing import ClassVar, NamedTuple

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.strip import Strip
from textual.timer import Timer

from pdtui.engine.events import LineKind, LogRecord
from pdtui.support.text import inert, make_visible
from pdtui.ui.format import clock_only

PAINT_INTERVAL = 0.05
"""A busy log repaints at most this often (20 times a second): live to the eye, cheap for the loop."""
FLOOD_PAINT_INTERVAL = 0.1
"""The same for a log that scrolled more than a screenful since its last paint: too fast to read
anyway, and a paint redraws every row. A multiple of ``PAINT_INTERVAL``, so views keep one beat."""

DATES_FROM = 120
"""A view narrower than this many cells draws each line's opening stamp without its date (``[05:10:08 TP0]``):
room for the message in side-by-side and side-pane panels. Zoomed, saved and filtered lines keep the date."""

MAX_TAG_WIDTH = 12
"""The widest tag a tagged view gives its lines' source (a service, a node): longer ones are cut."""

STRIP_CACHE = 64
"""Strips kept for rows drawn lately: about a screenful, for scrolling by hand. Each strip holds a few derived
strips and their caches, so a large cache makes every full garbage collection slower."""

KIND_COMPONENTS: dict[LineKind, str] = {
    LineKind.READY: "logview--ready",
    LineKind.FAIL: "logview--fail",
    LineKind.WARN: "logview--warn",
    LineKind.SYSTEM: "logview--system",
}


class Row(NamedTuple):
    """One kept line, as the view hands it out: made on demand from the view's compact columns."""

    text: str                      # as the journal gave it: render only through ``shown``
    kind: LineKind = LineKind.NORMAL
    timestamp: float | None = None
    tag: str = ""

    @property
    def shown(self) -> str:
        """Inert and capped: safe to draw and to match a filter against."""
        return inert(self.text)

    def saved(self) -> str:
        """The full line for a saved file: never capped, controls still made visible."""
        prefix = f"{self.tag}\t" if self.tag else ""
        return prefix + make_visible(self.text)


class Lines:
    """The kept lines as columns of plain values: a text list, a kind byte array, a float array.

    Ten thousand lines per panel would otherwise be tens of thousands of objects the
    garbage collector walks on every full collection (a 100 ms pause with three busy
    panels); strings, bytes and floats in arrays are never walked, and take a third
    of the memory.
    """

    __slots__ = ("texts", "kinds", "stamps", "tags")

    def __init__(self, tagged: bool) -> None:
        self.texts: list[str] = []
        self.kinds = bytearray()
        self.stamps = array("d")
        self.tags: list[str] | None = [] if tagged else None

    def __len__(self) -> int:
        return len(self.texts)

    def extend(self, lines: Sequence[LogRecord | Row], tags: list[str]) -> None:
        """Add ``lines``; ``tags`` has one per line in a tagged (merged) view, and is ignored otherwise."""
        self.texts.extend(line.text for line in lines)
        self.kinds.extend(_KIND_CODE[line.kind] for line in lines)
        self.stamps.extend(_NO_TIME if line.timestamp is None else line.timestamp for line in lines)
        if self.tags is not None:
            self.tags.extend(tags)

    def drop_first(self, count: int) -> None:
        del self.texts[:count], self.kinds[:count], self.stamps[:count]
        if self.tags is not None:
            del self.tags[:count]

    def clear(self) -> None:
        self.drop_first(len(self.texts))

    def row(self, index: int, tag: str) -> Row:
        stamp = self.stamps[index]
        return Row(self.texts[index], _KINDS[self.kinds[index]], None if stamp != stamp else stamp,
                   self.tags[index] if self.tags is not None else tag)


_KINDS: tuple[LineKind, ...] = tuple(LineKind)
_KIND_CODE: dict[LineKind, int] = {kind: code for code, kind in enumerate(_KINDS)}
_NO_TIME = float("nan")


class WholeCellThumb(ScrollBarRender):
    """A log's thumb drawn in whole cells, without the eighth-cell glyphs at its ends.

    A following log of a few hundred lines moves an eighth-cell thumb on nearly every new line, and a scrollbar's
    redraw costs as much as the log's own new row; in whole cells it moves once in many lines.
    """

    VERTICAL_BARS: ClassVar[list[str]] = [" "]


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

    paint_listeners: ClassVar[list[Callable[[LogView, int, int], None]]] = []
    """Called after every paint of any view with the view and the sequence numbers ``start, stop`` of the lines
    that paint put on screen: how a measurement learns when a line reached the screen (an empty list costs nothing)."""

    follow: reactive[bool] = reactive(True)
    """Keep the newest line in view; when False the view holds its position as lines arrive."""

    def __init__(self, limit: int = 10_000, *, tag: str = "", tag_width: int = 0, id: str | None = None) -> None:
        super().__init__(id=id)
        self.limit = max(1, limit)
        self.tag = tag                      # the service of every line (panels); tagged views keep one per line
        self.tag_width = tag_width
        self._lines = Lines(tagged=tag_width > 0)
        self._base = 0        # sequence number of self._lines[0]
        self._next = 0        # sequence number the next appended line gets
        self._pattern: re.Pattern[str] | None = None
        self._matches: list[int] = []
        self._cache: LRUCache[tuple[int, int], Strip] = LRUCache(STRIP_CACHE)
        self._finished: LRUCache[tuple[int, int], Strip] = LRUCache(STRIP_CACHE)   # (sequence, row): as drawn
        self._finish: tuple[object, ...] = ()      # what the finished rows were made for: width, background, filters
        self._painted_next = 0              # lines before this sequence number are on screen
        self._last_paint = float("-inf")
        self._paint_timer: Timer | None = None
        self._paint_interval = PAINT_INTERVAL
        self._dropped = 0                   # filtered rows dropped off the top since the last paint
        self._styles: dict[str | None, Style] | None = None
        self._width: int | None = None
        self._thumb_held = False            # a block that moves the thumb is running: it redraws the bar once

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
        return (self._row(seq) for seq in range(self.first_seq, self._next))

    def visible_rows(self) -> Iterator[Row]:
        """The rows that pass the filter, oldest first."""
        return (self._row(self._seq_at(index)) for index in range(self.row_count))

    def timestamps(self, start: int, stop: int) -> list[float]:
        """Journal times of lines ``start`` to ``stop`` (sequence numbers) still kept; lines without one left out."""
        first = max(start, self.first_seq) - self._base
        return [t for t in self._lines.stamps[first:stop - self._base] if t == t]

    def append(self, lines: Sequence[LogRecord | Row], tags: Iterable[str] | None = None) -> None:
        """Add a batch of lines; the screen shows them at the next paint (at most every ``PAINT_INTERVAL``).

        ``tags``: one per line for a tagged (merged) view; other views tag every line with :attr:`tag`.
        """
        batch = lines[-self.limit:]
        if not batch:
            return
        before = self.row_count
        start = self._next
        if not self.tag_width:
            kept_tags: list[str] = []
        else:
            kept_tags = [self.tag] * len(batch) if tags is None else list(tags)[-len(batch):]
        self._lines.extend(batch, kept_tags)
        self._next += len(batch)
        added = len(batch)
        if self._pattern is not None:
            search = self._pattern.search
            matched = [start + i for i, line in enumerate(batch) if search(inert(line.text))]
            self._matches.extend(matched)
            added = len(matched)
        self._dropped += before + added - self.row_count
        self._trim()
        self._schedule_paint()

    def _trim(self) -> None:
        """Forget dropped lines once they are as many as the limit: amortised O(1) per line."""
        first = self.first_seq
        if first - self._base >= self.limit:
            self._lines.drop_first(first - self._base)
            self._base = first
            del self._matches[: bisect_left(self._matches, first)]
            self._forget_strips()

    def clear(self) -> None:
        """Forget every line (the filter stays)."""
        self._lines.clear()
        self._matches.clear()
        self._base = self._next
        self._forget_strips()
        self._dropped = 0
        self._paint()

    def _schedule_paint(self) -> None:
        """Paint now if the last paint is old enough, else once the interval is up.

        A log at 50,000 lines a second scrolls a whole panel every frame; painting it
        more often than the eye can follow only takes the event loop from everything else.
        """
        if self._paint_timer is not None:
            return
        now = monotonic()
        interval = self._paint_interval
        if now - self._last_paint >= interval or not self.is_mounted:
            self._paint()
        else:   # on a shared beat, so busy views repaint in the same frame
            wait = interval - now % interval
            self._paint_timer = self.set_timer(wait, self._paint, name="logview-paint")

    @property
    def paint_interval(self) -> float:
        """The least time between two paints now: longer while the log floods."""
        return self._paint_interval

    @property
    def paint_pending(self) -> bool:
        """Lines arrived that the screen will show at the next beat."""
        return self._paint_timer is not None

    def _paint(self) -> None:
        flooded = self._next - self._painted_next > self.size.height
        self._paint_interval = FLOOD_PAINT_INTERVAL if flooded else PAINT_INTERVAL
        self._paint_timer = None
        self._last_paint = monotonic()
        start, self._painted_next = self._painted_next, self._next
        dropped, self._dropped = self._dropped, 0
        self._refit(dropped)
        for listener in LogView.paint_listeners:
            listener(self, start, self._painted_next)

    def set_filter(self, pattern: re.Pattern[str] | None) -> None:
        """Show only lines matching ``pattern`` (None: every line)."""
        self._pattern = pattern
        first = self.first_seq
        self._matches = (
            [first + i for i, row in enumerate(self.rows()) if pattern.search(row.shown)]
            if pattern is not None
            else []
        )
        self._forget_strips()
        self.virtual_size = Size(self.size.width, self.row_count)
        self.scroll_to(y=self.max_scroll_y if self.follow else 0, animate=False)
        self.refresh()

    def _refit(self, dropped: int) -> None:
        """Resize the virtual area; follow the end, or keep the rows in view where they were."""
        with self._thumb_moves():
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
        if self.show_vertical_scrollbar:     # drawn by the caller's _thumb_moves, if its thumb moved
            self.vertical_scrollbar.set_reactive(ScrollBar.window_virtual_size, size.height)

    def watch_scroll_y(self, old: float, new: float) -> None:
        """As ScrollView's, but the scrollbar is drawn again only when its thumb moved on screen."""
        if self.show_vertical_scrollbar:
            bar = self.vertical_scrollbar
            with self._thumb_moves():
                bar.set_reactive(ScrollBar.position, bar.validate_position(new))
        if round(old) != round(new):
            self.refresh(self.size.region)

    @contextmanager
    def _thumb_moves(self) -> Iterator[None]:
        """Redraw the scrollbar after the block only if its thumb moved on screen.

        A following log moves its thumb by a fraction of a cell per line once it holds a few hundred lines
        (:class:`WholeCellThumb`), and a scrollbar's redraw costs as much as the log's own new row.
        """
        if self._thumb_held or not self.show_vertical_scrollbar:
            yield
            return
        bar = self.vertical_scrollbar
        before, self._thumb_held = _thumb(bar), True
        try:
            yield
        finally:
            self._thumb_held = False
        if _thumb(bar) != before:
            bar.refresh()

    # -- follow -------------------------------------------------------------------

    def on_mount(self) -> None:
        # Textual's documented way to draw one widget's scrollbar differently, though typed as a class variable
        self.vertical_scrollbar.renderer = WholeCellThumb     # type: ignore[misc]

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.scroll_end(animate=False, x_axis=False)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, self.row_count)
        self._forget_strips()
        self._finished.maxsize = max(STRIP_CACHE, 2 * self.size.height)    # a screenful is always found
        self._width = None
        if self.follow:
            self.scroll_end(animate=False, x_axis=False)

    # -- drawing ------------------------------------------------------------------

    def _forget_strips(self) -> None:
        """The rows drawn so far no longer hold (a filter, a resize, a new style, lines forgotten)."""
        self._cache.clear()
        self._finished.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._forget_strips()
        self._styles = None

    def _style(self, component: str | None) -> Style:
        """The base style, or the base with a component's; computed once per style change, not per row."""
        if self._styles is None:
            base = self.rich_style
            self._styles = {None: base} | {
                name: base + self.get_component_rich_style(name, partial=True) for name in self.COMPONENT_CLASSES
            }
        return self._styles[component]

    def render_lines(self, crop: Region) -> list[Strip]:
        self._width = self.scrollable_content_region.width   # once per paint, not once per row
        if not self._plain_box():
            return super().render_lines(crop)
        return self._finished_lines(crop)

    def _plain_box(self) -> bool:
        """Whether the styles put nothing around or over a row (border, outline, padding, tint, opacity, hatch):
        then a row's finished strip is Textual's padded, filtered row, and can be kept (:meth:`_finished_lines`)."""
        styles = self.styles
        return (not any(styles.gutter) and not any(edge for edge, _ in styles.outline) and not styles.tint.a
                and self.opacity == 1.0 and styles.text_opacity == 1.0
                and (not styles.has_rule("hatch") or styles.hatch == "none")
                and self._border_title is None and self._border_subtitle is None)

    def _finished_lines(self, crop: Region) -> list[Strip]:
        """The rows in ``crop`` as Textual's styles cache finishes them (padded to the view's width, the app's line
        filters applied), each kept by the line it shows and its row.

        Textual keeps finished rows by their place on screen, so a following log, whose rows all move up for each
        new line, has every row padded and filtered again, in new strips: most of a quiet log's repaint. Kept by
        line, all but the new row are found as they were.
        """
        width = self.size.width
        base_background, background = self.background_colors
        filters = tuple(self.get_line_filters())
        finish = (width, background, filters)
        if finish != self._finish:
            self._finish = finish
            self._finished.clear()
        inner = self._styles_cache.get_inner_outer(base_background, background)[0].rich_style
        kept, offset, rows = self._finished, self.scroll_offset.y, self.row_count
        strips: list[Strip] = []
        for y in crop.line_range:
            index = offset + y
            key = (self._seq_at(index) if index < rows else -1, index)
            strip = kept.get(key)
            if strip is None:
                strip = self.render_line(y).adjust_cell_length(width, inner)
                for line_filter in filters:
                    strip = strip.apply_filter(line_filter, background)
                kept[key] = strip
            strips.append(strip)
        x1, x2 = crop.column_span
        return strips if (x1, x2) == (0, width) else [strip.crop(x1, x2) for strip in strips]

    def _seq_at(self, index: int) -> int:
        if self._pattern is None:
            return self.first_seq + index
        return self._matches[bisect_left(self._matches, self.first_seq) + index]

    def _row(self, seq: int) -> Row:
        return self._lines.row(seq - self._base, self.tag)

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self._width if self._width is not None else self.scrollable_content_region.width
        if index >= self.row_count:
            return Strip.blank(width, self._style(None))
        seq = self._seq_at(index)
        key = (seq, width)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._render_row(self._row(seq), width)
            self._cache[key] = strip
        return strip.apply_offsets(0, index)

    def _render_row(self, row: Row, width: int) -> Strip:
        """Segments straight from the row's inert text: no ``Text`` to build and render per line."""
        pieces: list[tuple[str, Style]] = []
        if self.tag_width:
            tag = row.tag[: self.tag_width].ljust(self.tag_width)
            pieces.append((f"{tag} │ ", self._style("logview--tag")))
        shown = row.shown if self.size.width >= DATES_FROM else clock_only(row.shown)   # a resize forgets strips
        pieces.append((shown, self._style(KIND_COMPONENTS.get(row.kind))))
        return Strip(_fit(pieces, width, self._style(None)), max(0, width))


def _thumb(bar: ScrollBar) -> list[Segment]:
    """The cells a vertical scrollbar draws for its figures now (its colours aside), as its renderer computes them."""
    window = bar.window_size if bar.window_size < bar.window_virtual_size else 0
    drawn = bar.renderer.render_bar(size=bar.size.height, virtual_size=ceil(bar.window_virtual_size),
                                    window_size=ceil(window), position=bar.position, thickness=bar.size.width)
    return drawn.segments


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
