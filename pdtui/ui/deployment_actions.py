"""What the screen's keys and palette do beyond the screen: retry, restart, stop, prove the pairs, save a log, quit.

Each action with an effect beyond the screen (a service, the engine's requests, a file) is refused, saying so, in a
page served to watch (:data:`SIDE_EFFECTS`); a restart or a stop is asked first, showing the exact command. Quitting
is decided here (asked first while a bring-up is under way) and carried out by the app, which closes the event
source before it exits.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from textual.app import SystemCommand

from pdtui.config import BACKEND_ROLES
from pdtui.engine.events import EventSource
from pdtui.engine.intent import RestartHow
from pdtui.support.exits import EXIT_INTERRUPTED
from pdtui.ui.panel import ServicePanel
from pdtui.ui.saved_log import safe_name, write_new
from pdtui.ui.screens import ConfirmScreen, QuitScreen, RestartScreen

if TYPE_CHECKING:
    from pdtui.ui.deployment_screen import DeploymentScreen

SIDE_EFFECTS: dict[str, str] = {
    "retry": "retry",
    "restart": "restart",           # drained, rolled or at once: the choice comes after the gate
    "stop": "stop",
    "pairs": "proving the pairs",   # a request to every prefill x decode pair
    "save": "saving a log",         # a file (the terminal) or a download (a browser with the token)
}
"""Every action of the screen with an effect beyond it (a service, the engine's requests, a file), by the words its
refusal says: what a page served to watch refuses, by key, from the palette or called. The one list: each method
of :class:`DeploymentActions` named here is wrapped by :func:`refusable` once."""

ActionsClass = TypeVar("ActionsClass", bound="DeploymentActions")


def refusable(actions: type[ActionsClass]) -> type[ActionsClass]:
    """Wrap each method of ``actions`` named in :data:`SIDE_EFFECTS` so that a page served to watch refuses it."""
    for name, words in SIDE_EFFECTS.items():
        setattr(actions, name, _gate(getattr(actions, name), words))
    return actions


def _gate(action: Callable[[DeploymentActions], None], words: str) -> Callable[[DeploymentActions], None]:
    @functools.wraps(action)
    def gate(self: DeploymentActions) -> None:
        if not self.refused(words):
            action(self)

    return gate


@refusable
class DeploymentActions:
    """The deployment's screen's actions on the focused service, the engine and the files; its palette entries."""

    def __init__(self, screen: DeploymentScreen, source: EventSource, refuse_actions: str) -> None:
        self.screen = screen
        self.source = source
        self.refuse_actions = refuse_actions   # why every action in SIDE_EFFECTS is refused (a page served to watch)

    def refused(self, verb: str) -> bool:
        """True (after saying so) when this screen may not act: a page served to watch only (see :data:`SIDE_EFFECTS`)."""
        if self.refuse_actions:
            self.screen.notify(f"{verb} refused: {self.refuse_actions}", severity="warning", markup=False)
        return bool(self.refuse_actions)

    def _focused_panel(self) -> ServicePanel | None:
        return self.screen.board.panel_of(self.screen.focused_log())

    def retry(self) -> None:
        panel = self._focused_panel()
        if panel is None:
            self.screen.notify("focus a service panel to retry it", severity="warning")
            return
        if not panel.lead.retryable:      # a server over several nodes: any rank failed (it stopped the others)
            self.screen.notify(f"{panel.service} is {panel.lead.state.value}: only a failed or timed-out service "
                               f"can be retried", severity="warning", markup=False)
            return
        if self.source.retry(panel.service):
            self.screen.notify(f"retrying {panel.service}", markup=False)
        else:
            self.screen.notify(f"{panel.service} cannot be retried now", severity="warning", markup=False)

    def pairs(self) -> None:
        """Prove every prefill × decode pair behind the serving routers again (one request each)."""
        if self.source.prove_pairs():
            self.screen.notify("proving every prefill × decode pair")
        else:
            self.screen.notify("no router serves: no pairs to prove", severity="warning")

    def restart(self) -> None:
        self._confirm("restart")

    def stop(self) -> None:
        self._confirm("stop")

    def save(self) -> None:
        """The focused log as text: a download in a browser (nothing written where the server runs), else a new
        file in the working directory, readable by its owner alone."""
        log = self.screen.focused_log()
        if log is None:
            return
        panel = self._focused_panel()
        service = panel.service if panel is not None else "all"
        stem = f"pdtui-{safe_name(self.screen.board.deployment)}-{safe_name(service)}"
        text = "".join(f"{row.saved()}\n" for row in log.rows())
        app = self.screen.app
        if app.is_web:
            app.deliver_text(io.StringIO(text), save_filename=f"{stem}.log", mime_type="text/plain")
            self.screen.notify(f"sent {log.total} lines to the browser as {stem}.log", title="log saved",
                               markup=False)
            return
        try:
            path = write_new(Path.cwd(), stem, text)     # 0600: a whole journal
        except OSError as error:
            self.screen.notify(f"could not save {error.filename or stem}: {error.strerror}", severity="error",
                               markup=False)
            return
        self.screen.notify(f"saved {log.total} lines to {path}", title="log saved", markup=False)

    def _confirm(self, verb: str) -> None:
        """Restart or stop the focused service, once the user has seen the exact command and said yes."""
        panel = self._focused_panel()
        if panel is None:
            self.screen.notify(f"focus a service panel to {verb} it", severity="warning")
            return
        info = panel.view.info
        after = [p.service for p in self.screen.board.panels.values() if info.name in p.view.info.after]
        if verb == "restart" and after and info.role in BACKEND_ROLES:
            self._choose_restart(panel, after)
            return
        if verb == "restart":
            consequence = (f"{', '.join(after)} will wait for it and be proven again." if after
                           else "pdtui waits until it is ready again.")
            command = info.restart_command
        else:
            drained = " It is taken out of its routers first (drained)." if after and info.role in BACKEND_ROLES else ""
            consequence = f"pdtui waits until it is inactive and its GPUs' memory is released.{drained}"
            command = info.stop_command
        what = f"{verb.capitalize()} {info.name} ({info.unit})"

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            act = self.source.restart if verb == "restart" else self.source.stop
            if act(info.name):
                self.screen.notify(f"{verb} {info.name}: {command}", markup=False)
            else:
                done_word = "restarted" if verb == "restart" else "stopped"
                self.screen.notify(f"{info.name} is {panel.view.state.value}: it cannot be {done_word} now",
                                   severity="warning", markup=False)

        self.screen.app.push_screen(ConfirmScreen(what, command, info.host, consequence), callback=answered)

    def _choose_restart(self, panel: ServicePanel, routers: list[str]) -> None:
        """A backend a router sends requests to: drained (the routers serve on), its role rolled, or at once."""
        info = panel.view.info
        where, keeps = ", ".join(routers), "keeps" if len(routers) == 1 else "keep"
        role = [p.service for p in self.screen.board.panels.values() if p.view.info.role == info.role]
        choices = {RestartHow.DRAIN: f"out of {where}, its requests finished, restarted, proven, back in; {where} "
                                     f"{keeps} serving",
                   RestartHow.NOW: f"restarted at once; {where} {keeps} sending it requests until its health "
                                   f"checks notice"}
        if len(role) > 1:
            choices[RestartHow.ROLLING] = (f"each {info.role} in turn ({', '.join(role)}), {info.name} first, each "
                                           f"drained and back before the next")

        def chosen(how: RestartHow | None) -> None:
            if how is None:
                return
            if self.source.restart(info.name, how):
                self.screen.notify(f"restart {info.name} ({how.value}): {info.restart_command}", markup=False)
            else:
                self.screen.notify(f"{info.name} is {panel.view.state.value}: it cannot be restarted now",
                                   severity="warning", markup=False)

        self.screen.app.push_screen(RestartScreen(f"Restart {info.name} ({info.unit})", info.restart_command,
                                                  info.host, choices), callback=chosen)

    async def quit(self) -> None:
        """Quit: asked first while a bring-up is under way (the screen lists what stays running)."""
        if self.screen.in_progress:
            self.screen.app.push_screen(QuitScreen(self._started_units()), callback=self._confirmed_quit)
        else:
            await self._leave()

    async def _confirmed_quit(self, quit: bool | None) -> None:
        if quit:
            await self._leave()

    async def _leave(self) -> None:
        done = self.screen.done
        code = EXIT_INTERRUPTED if self.screen.in_progress or done is None else done.exit_code
        await self.screen.app.leave(code, self.left_running())

    def _started_units(self) -> list[str]:
        """Units pdtui started in this session, in plan order, then any other the engine said it left running."""
        units = self.screen.board.started_units()
        if self.screen.done is not None:
            units += [unit for unit in self.screen.done.left_running if unit not in units]
        return units

    def left_running(self) -> list[str]:
        """What quitting leaves running: the engine's word after Done, else every unit started."""
        if self.screen.done is not None and not self.screen.in_progress:
            return list(self.screen.done.left_running)
        return self._started_units()

    def system_commands(self) -> Iterator[SystemCommand]:
        """The screen's actions in the command palette: each runs what its key runs."""
        screen = self.screen
        yield SystemCommand("Follow / pause", "Follow the focused log or hold it where it is", screen.action_follow)
        yield SystemCommand("Filter", "Filter the focused log by a regular expression", screen.action_filter)
        yield SystemCommand("Zoom", "Zoom the focused panel to the whole screen, and back", screen.action_zoom)
        yield SystemCommand("Retry", "Retry the focused service when it failed or timed out", screen.action_retry)
        yield SystemCommand("Prove pairs", "Prove every prefill × decode pair again (one request each)",
                            screen.action_pairs)
        yield SystemCommand("Restart service", "Restart the focused service (asks first)", screen.action_restart)
        yield SystemCommand("Stop service", "Stop the focused service (asks first)", screen.action_stop)
        yield SystemCommand("All logs", "Every service's log merged by time", screen.action_all_logs)
        yield SystemCommand("Save log", "Save the focused log to a file (in a browser: a download)",
                            screen.action_save)
        yield SystemCommand("Help", "Keys and badges", screen.action_help)
