"""What the UI tests share beside pdtui's scripted bring-ups (pdtui/sim/scripted.py): the app with its notices kept,
the screen read back as text, and the widgets' next paint to wait on."""

from __future__ import annotations

import html
import re

from rich.cells import cell_len

from pdtui.sim.scripted import ScriptedSource
from pdtui.ui.app import PdtuiApp
from pdtui.ui.logview import PAINT_INTERVAL, LogView


async def settle(pilot) -> None:
    """Let the scripted events reach the widgets, and every log its next paint."""
    for _ in range(4):
        await pilot.pause()
    while any(view.paint_pending for view in pilot.app.query(LogView)):
        await pilot.pause(PAINT_INTERVAL / 5)


class SteadyApp(PdtuiApp):
    """The app with its toasts held for an hour: a toast ends on the wall clock, and a picture taken on a loaded
    machine seconds after it was raised would miss it."""

    def notify(self, message: str, *, timeout: float | None = None, **kwargs: object) -> None:  # type: ignore[override]
        super().notify(message, timeout=3600, **kwargs)  # type: ignore[arg-type]


class RecordingApp(PdtuiApp):
    """The app, keeping the message of every notification it shows."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.notices: list[str] = []

    def notify(self, message: str, **kwargs: object) -> None:  # type: ignore[override]
        self.notices.append(message)
        super().notify(message, **kwargs)  # type: ignore[arg-type]


def make_app(script: list, **kwargs: object) -> tuple[RecordingApp, ScriptedSource]:
    source = ScriptedSource(script)
    kwargs.setdefault("clock", lambda: 0.0)
    return RecordingApp(source, **kwargs), source


def log_lines(view: LogView) -> list[str]:
    """The log as drawn: one string per visible row."""
    return [view.render_line(y).text for y in range(view.scrollable_content_region.height)]


SVG_TEXT = re.compile(r'<text [^>]*\bx="([\d.]+)"[^>]*-line-(\d+)\)">([^<]*)</text>')
SVG_CELL = 20 * 0.61
"""The width of one cell in Rich's SVG export (its font size times its aspect ratio)."""


def screen_text(app: PdtuiApp) -> str:
    """The screen as drawn, one string per row, read back from Textual's own SVG screenshot.

    The SVG leaves out runs of blank cells, so each run of text is placed at its column;
    the line breaks it keeps as text are dropped.
    """
    rows: dict[int, str] = {}
    for x, row, text in SVG_TEXT.findall(app.export_screenshot()):
        if text == "\n":
            continue
        line = rows.get(int(row), "")
        gap = round(float(x) / SVG_CELL) - cell_len(line)
        rows[int(row)] = line + " " * gap + html.unescape(text).replace("\xa0", " ")
    return "\n".join(rows.get(y, "") for y in range(max(rows, default=-1) + 1))
