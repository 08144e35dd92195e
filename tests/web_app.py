"""A tiny Textual app that a web server's test runs per session: it shows the mode it was started in and its PID."""

import os
import sys

from textual.app import App, ComposeResult
from textual.widgets import Static


class Shown(App[None]):
    def compose(self) -> ComposeResult:
        yield Static(f"mode={sys.argv[1]} pid={os.getpid()}")


if __name__ == "__main__":
    Shown().run()
