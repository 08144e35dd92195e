"""The ``/`` prompt: a regex filter for the focused log, with errors shown inline."""

from __future__ import annotations

import re

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, Static

from pdtui.config.regex import hazard
from pdtui.ui.logview import LogView


def compile_filter(source: str) -> re.Pattern[str] | None:
    """Compile a filter; empty means no filter. Raises ``re.error`` for a bad pattern, and for one that can take
    exponential time (config/regex.py): it runs on every line of the log, in the process that draws the screen
    (a web session's, for a viewer who only watches)."""
    if not source:
        return None
    try:
        pattern = re.compile(source)
    except (OverflowError, RecursionError) as exc:     # absurd repeats, deep nesting
        raise re.error(str(exc)) from None
    if why := hazard(source):
        raise re.error(f"refused, it can take exponential time: {why}")
    return pattern


class FilterBar(Vertical):
    """An input docked above the footer; Enter applies, Escape closes, a bad regex says why."""

    BINDINGS = [Binding("escape", "close", "close filter")]

    def __init__(self) -> None:
        super().__init__(id="filter-bar")
        self.target: LogView | None = None
        self.input = Input(placeholder="regex (empty clears the filter, esc closes)", id="filter-input", compact=True)
        self.message = Static(id="filter-message")

    def compose(self) -> ComposeResult:
        with Horizontal(id="filter-row"):
            yield Static("filter /", id="filter-label")
            yield self.input
        yield self.message

    def open(self, target: LogView) -> None:
        """Show the prompt for ``target``, pre-filled with its current filter."""
        self.target = target
        self.input.value = target.pattern.pattern if target.pattern is not None else ""
        self.message.display = False
        self.display = True
        self.input.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            pattern = compile_filter(event.value)
        except re.error as error:
            self.message.update(Text(f"invalid regex: {error}", no_wrap=True, overflow="ellipsis"))
            self.message.display = True
            return
        if self.target is not None:
            self.target.set_filter(pattern)
        self.action_close()

    def action_close(self) -> None:
        self.display = False
        if self.target is not None:
            self.target.focus()
            self.post_message(FilterBar.Closed(self.target))

    class Closed(Message):
        """Posted when the prompt closes, so the log's status line can be redrawn."""

        def __init__(self, target: LogView) -> None:
            super().__init__()
            self.target = target
