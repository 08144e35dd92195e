"""One host of units, as the engine uses it: its connection and everything that runs over it.

A :class:`HostSession` is a :class:`Session` (the Host, commands within a
deadline, the HTTP prober) with what a host of units needs: how its systemctl
and journalctl are invoked, the batched unit looks, starts and
invocation-history reads, and the one journal tail that follows all of its
units.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, cast

from pdtui.engine.log_entry import LogEntry
from pdtui.engine.session import Session
from pdtui.engine.states import ServiceState
from pdtui.hosts.base import Host, HostError, Result
from pdtui.servers import ServerCommand
from pdtui.targets.systemd.commands import Commands, parse_cat, sudo_needs_password
from pdtui.targets.systemd.journal_tail import JournalTail
from pdtui.targets.systemd.settings import HostConfig
from pdtui.targets.systemd.shared_commands import InvocationHistory, UnitLooker, UnitStarter
from pdtui.targets.systemd.unit_drift import parse_installed, service_drift

if TYPE_CHECKING:
    from pdtui.engine.preflight import Reacher
    from pdtui.engine.service_run import ServiceRun
    from pdtui.targets.systemd.unit_run import UnitRun


class HostSession(Session):
    looker: UnitLooker
    one_machine = True

    def __init__(self, config: HostConfig, host: Host, *, command_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config.name, host, command_timeout=command_timeout, clock=clock)
        self.config = config
        self.nvidia_smi = config.commands["nvidia-smi"]
        self.sysfs = config.sysfs
        self.commands = Commands.for_host(config)
        self.looker = UnitLooker(self.read, self.commands)
        self.starter = UnitStarter(functools.partial(self.command, waits=True), self.commands)   # waits for its job
        self.history = InvocationHistory(self.read, self.commands, until=self.tail_since)
        self.batchers = [self.looker, self.starter, self.history]
        self.tail: JournalTail | None = None

    async def command(self, argv: list[str], deadline: float | None = None, *, read_only: bool = False,
                      waits: bool = False, input: bytes | None = None) -> Result:
        """Run ``argv`` there, within the command timeout and ``deadline``; sudo asking for a password
        is the host's failure, said once in words the user can act on."""
        result = await super().command(argv, deadline, read_only=read_only, waits=waits, input=input)
        if not result.ok and sudo_needs_password(result.stderr):
            raise HostError(f"{self.name}: sudo asks for a password; pdtui needs passwordless sudo "
                            f"(sudo -n) for systemctl and journalctl")
        return result

    def follow(self, runs: Sequence[ServiceRun], on_problem: Callable[[str], None]) -> Coroutine[Any, Any, None]:
        """The host's one journal tail, for the units of all of ``runs``, each line handed to its unit's run."""
        by_unit = {run.unit: run for run in runs}

        def route(entry: LogEntry) -> None:
            run = by_unit.get(entry.source) if entry.source else None
            if run is not None:
                run.lines.take(entry)

        self.tail = JournalTail(self.host, self.commands, list(by_unit), on_entry=route, on_problem=on_problem)
        return self.tail.run()

    async def preflight(self, runs: Sequence[ServiceRun], reacher: Reacher, *, starting: bool) -> bool:
        """Each unit looked at (one batched ``systemctl show``): one the host does not know fails its service;
        when ``starting``, each installed unit is compared with the config (:meth:`_drift`)."""
        ok = True
        units = cast("Sequence[UnitRun]", runs)       # a host's services are its units
        # the installed units are read while they are looked at: neither waits for the other
        installed = asyncio.ensure_future(self._installed([run.unit for run in units])) if starting and units else None
        looks = await asyncio.gather(*(reacher.reach(run.show) for run in units), return_exceptions=True)
        for run, props in zip(units, looks, strict=True):
            if isinstance(props, HostError):
                run.transition(ServiceState.FAILED, str(props))
                ok = False
                continue
            if isinstance(props, BaseException):
                if installed is not None:
                    installed.cancel()
                raise props
            run.note_unit(props)
            if props.get("LoadState") == "not-found":
                run.transition(ServiceState.FAILED, f"unit {run.cfg.unit} not found on {self.name}")
                ok = False
        if installed is None:
            return ok     # nothing will be started: what the unit files say is not in question
        files = await installed
        if files is None:       # read while the host could not be reached yet: once more, now it is
            files = await self._installed([run.unit for run in units])
        return self._drift([r for r in runs if r.state is ServiceState.PENDING], files or {}) and ok

    async def _installed(self, units: list[str]) -> dict[str, list[tuple[str, str]]] | None:
        """The installed files of ``units`` (one ``systemctl cat`` for the host); None when the host did not answer."""
        try:
            result = await self.read(self.commands.cat(units))
        except HostError:
            return None
        return parse_cat(result.stdout)

    def _drift(self, runs: list[ServiceRun], installed: dict[str, list[tuple[str, str]]]) -> bool:
        """Each installed unit against the config: a unit that runs something else (other GPUs, NUMA node, port,
        mode, router backends) fails its service before start."""
        ok = True
        for run in runs:
            if run.unit not in installed:
                continue    # a systemctl without cat, or a unit of another kind: nothing to compare
            unit = parse_installed(installed[run.unit])
            if unit.exec_start:
                run.planned = ServerCommand(tuple(unit.exec_start), dict(unit.environment),
                                            f"its unit {run.unit} on {self.name}")
            for found in service_drift(run.w.deployment, run.cfg, unit):
                level = "error" if found.level == "error" else "info"
                run.tell.notice(level, found.text)
                if level == "error" and run.state is ServiceState.PENDING:
                    run.refuse(found.text.removeprefix(f"{run.name}: "))
                    ok = False
        return ok

    def tail_since(self) -> float | None:
        """The realtime (the host's journal) from which on the tail surely has every entry; None while unknown."""
        return self.tail.since if self.tail is not None else None

    @property
    def tail_live(self) -> bool:
        """Whether the tail surely sees every line written from now on.

        Once it knows where it starts (see :attr:`JournalTail.since`), every
        entry after that place comes through it, also when its stream breaks
        and opens again: a unit started after that needs no look at its history.
        """
        return self.tail_since() is not None
