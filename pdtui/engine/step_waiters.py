"""Who waits on one run's steps: each woken by that run's own steps, once its condition holds.

A run's steps are its state changes and the start-up phases it begins. A
waiter on one run (the bring-up asking a backend's ``/server_info`` once it
answers, a server's ranks watched for the first that fails) is woken by that
run alone: a fleet's thousand runs change state thousands of times a second,
and the bring-up's ``until`` wakes every waiter at each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def _any_step() -> bool:
    """What :meth:`StepWaiters.next_step` waits for: any step."""
    return True


class StepWaiters:
    """The conditions waited for on one run, each with the future its waiter awaits."""

    def __init__(self) -> None:
        self._awaited: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def stepped(self) -> None:
        """The run changed state or began a start-up phase: wake whoever waits for a step that makes their
        condition hold (each looked at here, so a waiter wakes once, not at every step)."""
        if not self._awaited:
            return
        awaited, self._awaited = self._awaited, []
        for condition, future in awaited:
            if future.done():                   # its waiter gave up (a timeout)
                continue
            if condition():
                future.set_result(None)
            else:
                self._awaited.append((condition, future))

    async def reaches(self, condition: Callable[[], bool]) -> None:
        """Until ``condition`` holds, looked at now and at each of the run's steps."""
        if not condition():
            await self._step_where(condition)

    async def next_step(self) -> None:
        """Until the run changes state or begins a start-up phase."""
        await self._step_where(_any_step)

    def _step_where(self, condition: Callable[[], bool]) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self._awaited.append((condition, future))
        return future
