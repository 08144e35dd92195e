"""One host of a deployment, as the engine uses it: its connection and everything that runs over it.

A :class:`Session` owns the Host (one connection), its commands and the HTTP
prober whose requests travel through the connection. A :class:`HostSession`
adds what a host of units needs: how its systemctl and journalctl are
invoked, the batched unit looks, starts and invocation-history reads, and the
one journal tail that follows all of its units. (A cluster's login host has a
ClusterSession: engine/cluster_session.py.) The orchestrator keeps one per
host instead of a dict per tool.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from pdtui.config import HostConfig
from pdtui.engine.http import HttpProber
from pdtui.engine.log_entry import LogEntry
from pdtui.hosts.base import Host, HostError, Result
from pdtui.targets.systemd.commands import Commands, sudo_needs_password
from pdtui.targets.systemd.journal_tail import JournalTail
from pdtui.targets.systemd.shared_commands import Batcher, InvocationHistory, UnitLooker, UnitStarter


class Looks(Protocol):
    """What a session's batched looks tell of themselves: a slow machine is looked at less often."""

    last_took: float


class Session:
    """A machine's connection as a run uses it: commands within a deadline, HTTP probes through it."""

    looker: Looks

    def __init__(self, name: str, host: Host, *, command_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.host = host
        self.prober = HttpProber(host)
        self.batchers: list[Batcher[Any]] = []     # its batched commands: ended at close
        self._command_timeout = command_timeout
        self._clock = clock

    async def command(self, argv: list[str], deadline: float | None = None) -> Result:
        """Run ``argv`` there, within the command timeout and ``deadline``."""
        timeout = self._command_timeout
        if deadline is not None:
            timeout = max(0.1, min(timeout, deadline - self._clock()))
        return await self.host.run(argv, timeout=timeout)

    async def close(self) -> None:
        """End the commands under way (a look whose askers are gone must not outlive the session), the probes'
        connections, then the connection."""
        for batcher in self.batchers:
            await batcher.close()
        await self.prober.close()
        try:
            await self.host.close()
        except Exception:   # closing a broken connection must not hide the real outcome
            pass


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
