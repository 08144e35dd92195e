"""One host of units, as the engine uses it: its connection and everything that runs over it.

A :class:`HostSession` is a :class:`Session` (the Host, commands within a
deadline, the HTTP prober) with what a host of units needs: how its systemctl
and journalctl are invoked, the batched unit looks, starts and
invocation-history reads, and the one journal tail that follows all of its
units.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pdtui.config import HostConfig
from pdtui.engine.log_entry import LogEntry
from pdtui.engine.session import Session
from pdtui.hosts.base import Host, HostError, Result
from pdtui.targets.systemd.commands import Commands, sudo_needs_password
from pdtui.targets.systemd.journal_tail import JournalTail
from pdtui.targets.systemd.shared_commands import InvocationHistory, UnitLooker, UnitStarter


class HostSession(Session):
    looker: UnitLooker

    def __init__(self, config: HostConfig, host: Host, *, command_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config.name, host, command_timeout=command_timeout, clock=clock)
        self.config = config
        self.commands = Commands.for_host(config)
        self.looker = UnitLooker(self.command, self.commands)
        self.starter = UnitStarter(self.command, self.commands)
        self.history = InvocationHistory(self.command, self.commands, until=self.tail_since)
        self.batchers = [self.looker, self.starter, self.history]
        self.tail: JournalTail | None = None

    async def command(self, argv: list[str], deadline: float | None = None) -> Result:
        """Run ``argv`` there, within the command timeout and ``deadline``; sudo asking for a password
        is the host's failure, said once in words the user can act on."""
        result = await super().command(argv, deadline)
        if not result.ok and sudo_needs_password(result.stderr):
            raise HostError(f"{self.name}: sudo asks for a password; pdtui needs passwordless sudo "
                            f"(sudo -n) for systemctl and journalctl")
        return result

    def follow(self, units: list[str], on_entry: Callable[[LogEntry], None],
               on_problem: Callable[[str], None]) -> JournalTail:
        """The host's one journal tail, for all of ``units``."""
        self.tail = JournalTail(self.host, self.commands, units, on_entry=on_entry, on_problem=on_problem)
        return self.tail

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
