"""Asks of a machine gathered into one command: a host's unit looks, a cluster's job looks.

A host has at most one command of each kind running: asks made meanwhile share
the next command, started when it ends. A slow host then gets fewer commands
instead of a pile of them that loads it further. A target subclasses
:class:`Batcher` with the command it batches.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from pdtui.hosts.base import Result

RunCommand = Callable[[list[str], float | None], Awaitable[Result]]   # (argv, deadline)

GATHER_WINDOW = 0.005   # asks within this many seconds of the first share a command


C = TypeVar("C")


class Batcher(Generic[C]):
    """Asks gathered into commands: one running at a time, each answering every ask it took.

    ``commands`` builds the argv (a host's systemd Commands, a cluster's SlurmCommands).
    """

    def __init__(self, run: RunCommand, commands: C) -> None:
        self._run = run
        self._commands = commands
        self._waiting: dict[Hashable, list[asyncio.Future]] = {}
        self._deadline = math.inf
        self._due = 0.0         # when the waiting asks' command goes out (loop time)
        self._batch: asyncio.Task | None = None

    async def _ask(self, key: Hashable, deadline: float | None = None) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._waiting:
            self._due = loop.time() + GATHER_WINDOW
        self._waiting.setdefault(key, []).append(future)
        if deadline is not None:
            self._deadline = min(self._deadline, deadline)
        if self._batch is None:
            self._batch = asyncio.create_task(self._batches())
        return await future

    async def _batches(self) -> None:
        """One command after another while anyone waits. The window counts from the first ask, not from when this
        task first runs: a fleet's bring-up asks every host's start in one busy turn of the loop, and the hosts'
        commands then go out together once the loop is free, not one slice of hosts per turn in the order their
        tasks happened to run."""
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                await asyncio.sleep(self._due - loop.time())
                waiting, self._waiting = self._waiting, {}
                deadline, self._deadline = self._deadline, math.inf
                await self._answer_all(waiting, None if deadline == math.inf else deadline)
        finally:
            self._batch = None
            for future in (f for futures in self._waiting.values() for f in futures):
                future.cancel()   # left behind only when this task itself was cancelled
            self._waiting.clear()

    async def close(self) -> None:
        """Stop the command under way: a look whose askers are gone must not outlive the session (a task
        left running when its event loop closes is cancelled there, and CPython 3.11's subprocess spawn,
        cancelled with its own pipe-connecting task, waits for ever)."""
        batch = self._batch
        if batch is not None:
            batch.cancel()
            await asyncio.gather(batch, return_exceptions=True)

    async def _answer_all(self, waiting: dict[Hashable, list[asyncio.Future]], deadline: float | None) -> None:
        try:
            answers = await self._answers(list(waiting), deadline)
        except BaseException as exc:   # the command's failure is every asker's
            for future in (f for futures in waiting.values() for f in futures if not f.done()):
                future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for key, futures in waiting.items():
            for future in futures:
                if not future.done():
                    future.set_result(answers[key])

    async def _answers(self, keys: list, deadline: float | None) -> dict:
        """Run one command for ``keys``; each key's answer."""
        raise NotImplementedError
