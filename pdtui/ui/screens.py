"""Modal screens: the key help, the quit confirmation, the confirmation of a restart or stop, and the choice of
how a backend under a serving router is restarted."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from pdtui.engine.intent import RestartHow
from pdtui.ui.format import BADGE_LABELS

HELP_KEYS: tuple[tuple[str, str], ...] = (
    ("?", "this help"),
    ("tab / shift+tab", "focus the next / previous panel"),
    ("f", "follow the focused log, or pause it where it is"),
    ("/", "filter the focused log by regex (empty: no filter)"),
    ("z", "zoom the focused panel to the whole screen, and back"),
    ("a", "all services' logs merged by time, and back"),
    ("s", "save the focused log to a file (in a browser: a download)"),
    ("r", "retry the focused service when it failed or timed out"),
    ("R", "restart the focused service (asks: drain, roll or now)"),
    ("x", "stop the focused service (asks first; shows the command)"),
    ("p", "prove every prefill × decode pair again, bypassing the router"),
    ("↑ ↓ pgup pgdn home end", "scroll the focused log"),
    ("ctrl+p", "command palette"),
    ("q", "quit (services keep running: only a confirmed stop stops one)"),
)

_LABELS = list(BADGE_LABELS.values())
BADGES = "  ".join(_LABELS[:6]) + "\n        " + "  ".join(_LABELS[6:])   # every state's badge, from its one home


def help_text() -> Text:
    """The keys and badges, as shown by ``?``."""
    width = max(len(key) for key, _ in HELP_KEYS)
    text = Text()
    for key, meaning in HELP_KEYS:
        text.append(key.rjust(width), "bold")
        text.append(f"  {meaning}\n")
    text.append("\nbadges: ", "bold")
    text.append(BADGES)
    return text


class HelpScreen(ModalScreen[None]):
    """Keys and badge meanings; any of escape, ? or q closes it."""

    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss", "close", show=True),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(Text("pdtui keys", "bold"), classes="modal-title")
            yield Static(help_text())

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)


class QuitScreen(ModalScreen[bool]):
    """Asks before quitting while a bring-up is in progress; says what stays running."""

    BINDINGS = [
        Binding("y", "answer(True)", "quit"),
        Binding("n,escape", "answer(False)", "stay"),
    ]

    def __init__(self, running_units: list[str]) -> None:
        super().__init__()
        self.running_units = running_units

    def compose(self) -> ComposeResult:
        units = ", ".join(self.running_units) if self.running_units else "none yet"
        message = Text.assemble(
            ("The bring-up is still in progress.\n", "bold"),
            "Quitting leaves every unit as it is (pdtui never stops services).\n",
            f"Started so far: {units}",
        )
        with Vertical(id="quit-box"):
            yield Static(message)
            with Horizontal(id="quit-buttons"):
                yield Button("Quit (y)", id="quit-yes", variant="error")
                yield Button("Stay (n)", id="quit-no", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "quit-yes")

    def action_answer(self, quit: bool) -> None:
        self.dismiss(quit)


class ConfirmScreen(ModalScreen[bool]):
    """Asks before a restart or a stop, showing the exact command and the host it runs on."""

    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, what: str, command: str, host: str, consequence: str) -> None:
        super().__init__()
        self.what, self.command, self.host, self.consequence = what, command, host, consequence

    def compose(self) -> ComposeResult:
        message = Text.assemble((f"{self.what}?\n", "bold"), "runs on ", (self.host, "bold"), ":\n  ",
                                (self.command, "bold"), f"\n{self.consequence}")
        with Vertical(id="confirm-box"):
            yield Static(message)
            with Horizontal(id="confirm-buttons"):
                yield Button("Yes (y)", id="confirm-yes", variant="error")
                yield Button("No (n)", id="confirm-no", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class RestartScreen(ModalScreen[RestartHow | None]):
    """How to restart a backend that a serving router sends requests to: drained (the default), its whole role
    rolled one at a time, or at once; each choice says what the router does meanwhile."""

    BINDINGS = [
        Binding("y,enter", "choose('drain')", "drain"),
        Binding("o", "choose('rolling')", "rolling"),
        Binding("exclamation_mark", "choose('now')", "now"),
        Binding("n,escape", "choose('')", "no"),
    ]

    def __init__(self, what: str, command: str, host: str, choices: dict[RestartHow, str]) -> None:
        super().__init__()
        self.what, self.command, self.host, self.choices = what, command, host, choices

    def compose(self) -> ComposeResult:
        message = Text.assemble((f"{self.what}?\n", "bold"), "runs on ", (self.host, "bold"), ":\n  ",
                                (self.command, "bold"), "\n")
        for how, key in ((RestartHow.DRAIN, "y"), (RestartHow.ROLLING, "o"), (RestartHow.NOW, "!")):
            if how in self.choices:
                message.append_text(Text.assemble("\n", (f"{key}  {how.value}: ", "bold"), self.choices[how]))
        with Vertical(id="restart-box"):
            yield Static(message)
            with Horizontal(id="confirm-buttons"):
                yield Button("Drain (y)", id="restart-drain", variant="primary")
                if RestartHow.ROLLING in self.choices:
                    yield Button("Rolling (o)", id="restart-rolling")
                yield Button("Now (!)", id="restart-now", variant="error")
                yield Button("No (n)", id="restart-no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_choose((event.button.id or "").removeprefix("restart-").replace("no", ""))

    def action_choose(self, how: str) -> None:
        chosen = RestartHow(how) if how else None
        self.dismiss(chosen if chosen is None or chosen in self.choices else None)
