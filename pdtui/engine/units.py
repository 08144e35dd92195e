"""Looking at the units of one host with as few commands as possible.

Every service looks at its unit now and then (``systemctl show``); on a host
with many units that would be a command per unit per look. Looks asked for at
the same moment share one ``systemctl show -p ... A B C``: the services of a
host look on a common beat, so a host costs one command per beat, not one per
unit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from pdtui.hosts.base import Result
from pdtui.systemd import Commands, parse_show_units

RunCommand = Callable[[list[str]], Awaitable[Result]]

GATHER_WINDOW = 0.005   # looks asked within this many seconds share a command


class UnitLooker:
    """``systemctl show`` of a host's units, batched."""

    def __init__(self, run: RunCommand, commands: Commands) -> None:
        self._run = run
        self._commands = commands
        self._waiting: dict[str, list[asyncio.Future]] = {}
        self._batch: asyncio.Task | None = None

    async def show(self, unit: str) -> dict[str, str]:
        """The unit's properties (LoadState ``not-found`` for a unit the host does not know)."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(unit, []).append(future)
        if self._batch is None:
            self._batch = asyncio.create_task(self._look())
        return await future

    async def _look(self) -> None:
        await asyncio.sleep(GATHER_WINDOW)
        waiting, self._waiting, self._batch = self._waiting, {}, None
        try:
            result = await self._run(self._commands.show(list(waiting)))
            by_unit = parse_show_units(result.stdout)
        except BaseException as exc:   # the command's failure is every asker's
            for future in (f for futures in waiting.values() for f in futures if not f.done()):
                future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for unit, futures in waiting.items():
            props = by_unit.get(unit, {"Id": unit, "LoadState": "not-found"} if result.ok else {})
            for future in futures:
                if not future.done():
                    future.set_result(props)
