"""Looking at, starting and reading the units of one host with as few commands as possible.

Every service looks at its unit now and then (``systemctl show``); on a host
with many units that would be a command per unit per look. Looks asked for at
the same moment share one ``systemctl show -p ... A B C``: the services of a
host look on a common beat, so a host costs one command per beat, not one per
unit. Starting the backends of a host (``systemctl start A B C``, and the look
at them right after, in the same remote command) and reading
what their new invocations logged before the tail saw it (one ``journalctl``
matching every invocation) are shared the same way.

A host has at most one command of each kind running: asks made meanwhile share
the next command, started when it ends. A slow host (a loaded machine, a slow
``systemctl``) then gets fewer commands instead of a pile of them that loads
it further.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pdtui.engine.batcher import Batcher, RunCommand
from pdtui.engine.log_entry import LogEntry
from pdtui.hosts.base import HostError, Result
from pdtui.targets.systemd.commands import Commands, parse_show_units
from pdtui.targets.systemd.journal_json import parse_entry


class UnitLooker(Batcher[Commands]):
    """``systemctl show`` of a host's units, batched."""

    last_took = 0.0     # seconds the last look took: a slow host is looked at less often

    async def show(self, unit: str) -> dict[str, str]:
        """The unit's properties (LoadState ``not-found`` for a unit the host does not know)."""
        return await self._ask(unit)

    async def _answers(self, units: list[str], deadline: float | None) -> dict[str, dict[str, str]]:
        started = time.monotonic()
        try:
            return await self._look(units, deadline)
        finally:
            self.last_took = time.monotonic() - started

    async def _look(self, units: list[str], deadline: float | None) -> dict[str, dict[str, str]]:
        result = await self._run(self._commands.show(units), deadline)
        by_unit = parse_show_units(result.stdout)
        return {u: by_unit.get(u, {"Id": u, "LoadState": "not-found"} if result.ok else {}) for u in units}


@dataclass(frozen=True, slots=True)
class Started:
    """A unit's start: its outcome, and the look at the unit that came right after it (None: none could be read)."""

    result: Result
    props: dict[str, str] | None


class UnitStarter(Batcher[Commands]):
    """``systemctl start`` of a host's units, batched (systemd runs the start jobs side by side), each unit looked
    at in the same remote command once the start returned."""

    async def start(self, unit: str, deadline: float | None = None) -> Started:
        """The start's outcome for ``unit`` (its own error lines when the shared command failed) and its look."""
        return await self._ask(unit, deadline)

    async def _answers(self, units: list[str], deadline: float | None) -> dict[str, Started]:
        result = await self._run(self._commands.start_and_show(units), deadline)
        looks = parse_show_units(result.stdout)
        start = Result(result.argv, result.exit_status, "", result.stderr)
        return {u: Started(start if len(units) == 1 else own_outcome(start, u, units), looks.get(u) or None)
                for u in units}


def own_outcome(result: Result, unit: str, units: list[str]) -> Result:
    """One unit's part of a ``systemctl start A B ...`` that failed.

    systemctl names the unit in each error line ("Job for A.service failed ...",
    "Failed to start B.service: ..."). A unit no line names was started; when
    no line names any unit (sudo refused, say), the failure is everyone's.
    """
    if result.ok:
        return result
    lines = result.stderr.splitlines()
    own = [line for line in lines if _names(line, unit)]
    if own:
        return Result(result.argv, result.exit_status, result.stdout, "\n".join(own))
    if any(_names(line, u) for line in lines for u in units):
        return Result(result.argv, 0, result.stdout, "")
    return result


def _names(line: str, unit: str) -> bool:
    """Whether ``line`` names ``unit`` as a word of its own (not inside another unit's name)."""
    return unit in {word.strip("\"'.,:;()") for word in line.split()}


class InvocationHistory(Batcher[Commands]):
    """The lines of given invocations the host's tail does not have: one ``journalctl`` for all asked together.

    ``until``: the realtime from which on the tail has every entry (see
    JournalTail.since), None while it cannot say. The read stops there, so a
    burst that lands before it is held once (the tail's) and not twice: a
    100,000-line burst read whole beside the tail's buffer of the same lines
    peaked at 247 MiB. journalctl has no until-cursor; ``--until`` is inclusive
    to the microsecond, and journald stamps a whole batch of a unit's lines
    with one microsecond, so the read and the tail share that batch's entries:
    the run drops the tail's copies by cursor (RunLines.consume).
    """

    def __init__(self, run: RunCommand, commands: Commands,
                 until: Callable[[], float | None] = lambda: None) -> None:
        super().__init__(run, commands)
        self._until = until

    async def lines(self, invocation: str) -> tuple[Result, list[LogEntry]]:
        """The command's result and the invocation's entries, oldest first."""
        return await self._ask(invocation)

    async def _answers(self, invocations: list[str], deadline: float | None) -> dict[str, tuple[Result, list]]:
        argv = self._commands.invocation_history(invocations, self._until())
        result = await self._run(argv, deadline)
        by_invocation: dict[str, list[LogEntry]] = {i: [] for i in invocations}
        for entry in map(parse_entry, result.stdout.splitlines()):
            if entry is not None and entry.invocation in by_invocation:
                by_invocation[entry.invocation].append(entry)
        return {i: (result, by_invocation[i]) for i in invocations}


ATTACH_LINES = 5_000
"""An attached unit's history is read as its last this many lines, plus its older lines that decide a judgement."""


async def attached_history(run: RunCommand, commands: Commands, invocation: str, telling: str,
                           start: tuple[float, float] | None = None, limit: int | None = None) -> list[LogEntry]:
    """What judging a running invocation needs, without reading a week of its log over SSH.

    Its last ``limit`` lines; when it wrote more, also the older lines that
    match ``telling`` (the ready line, fatal and evidence lines), found by the
    host's own ``journalctl --grep`` within ``start`` (the unit's start-up:
    from its start to its timeout, seconds since the epoch) when that is known,
    oldest first. Only there can a ready line count; a fatal line after it
    ends the unit in the same breath, which its state says. A journalctl built
    without pattern matching gets the whole history read instead.
    """
    limit = limit or ATTACH_LINES
    match = f"_SYSTEMD_INVOCATION_ID={invocation}"
    base = ("--output=json", "--all", "--no-pager", "--quiet")
    recent = _entries(await run(commands.journalctl(*base, f"--lines={limit}", match), None))
    if len(recent) < limit or not telling:
        return recent
    window = (f"--since=@{start[0]:.6f}", f"--until=@{start[1]:.6f}") if start else ()
    found = await run(commands.journalctl(*base, *window, "--case-sensitive=true", f"--grep={telling}", match), None)
    if found.exit_status == 1 and not found.stdout and not found.stderr.strip():
        return recent    # journalctl's --grep exits 1, silently, when nothing matched
    if not found.ok:     # no --grep here: the whole history, as a start that pdtui made reads it
        return _entries(await run(commands.journalctl(*base, match), None))
    seen = {entry.cursor for entry in recent}
    return [e for e in _entries(found) if e.cursor not in seen] + recent


def _entries(result: Result) -> list[LogEntry]:
    if not result.ok:
        raise HostError(f"journalctl failed, so readiness cannot be judged: "
                        f"{(result.stderr.strip().splitlines() or [f'exit status {result.exit_status}'])[-1]}")
    return [entry for entry in map(parse_entry, result.stdout.splitlines()) if entry is not None]
