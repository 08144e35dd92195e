"""A tiny Textual app that a web server's test runs per session: it shows the mode it was started in, its PID and
its terminal's size; ``d`` delivers a small text file (a download, in a browser)."""

import io
import os
import sys

from textual.app import App, ComposeResult
from textual.events import Resize
from textual.geometry import Size
from textual.widgets import Static

DELIVERED = "delivered by the session's app\n"


class Shown(App[None]):
    BINDINGS = [("d", "deliver", "deliver")]

    def compose(self) -> ComposeResult:
        yield Static(self.line(self.size))

    def line(self, size: Size) -> str:
        return f"mode={sys.argv[1]} pid={os.getpid()} size={size.width}x{size.height}"

    def on_resize(self, event: Resize) -> None:
        self.query_one(Static).update(self.line(event.size))

    def action_deliver(self) -> None:
        self.deliver_text(io.StringIO(DELIVERED), save_filename="shown.log")


if __name__ == "__main__":
    Shown().run()
