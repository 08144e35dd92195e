"""A server over several nodes: its ranks, one unit each, live and fail as one server.

SGLang tells no other node when one rank dies: the survivors sit in their next
collective until it times out (gloo's peer gone, NCCL's watchdog at 600 s, the
scheduler's own at 300 s), and a rank started again alone cannot rejoin the
group the others still hold. So the first rank that fails or times out fails
its server: :class:`RankWatch` stops every other rank (rank 0 first: on rank 0's
shutdown SGLang tells the others to end), says which rank failed, where and
why, and that a retry restarts all of them. While it does, the bring-up's
outcome waits (:attr:`RankWatch.unsettled`): nothing left running when it is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Protocol

from pdtui.engine.events import Event, Notice, ServerFailed
from pdtui.engine.service_run import ServiceRun
from pdtui.engine.states import ServiceState

S = ServiceState
CAUSE_GRACE = 5.0       # seconds a rank that failed because a peer went waits for that peer's own failure
FAILING = frozenset({S.FAILED, S.TIMED_OUT})
AT_REST = frozenset({S.FAILED, S.TIMED_OUT, S.BLOCKED, S.STOPPED})    # nothing of its own to stop


class Teller(Protocol):
    def emit(self, event: Event) -> None: ...

    def elapsed(self) -> float: ...

    def changed(self) -> None: ...


def rank_words(run: ServiceRun) -> str:
    """``rank 1 on gpu-b``: a rank as the user finds it, by its node."""
    return f"rank {run.cfg.rank} on {run.cfg.host}"


class RankWatch:
    """One server's ranks (rank 0 first): the first that fails takes the others down with it."""

    def __init__(self, ranks: Sequence[ServiceRun], teller: Teller, *, grace: float = CAUSE_GRACE) -> None:
        self.ranks = list(ranks)
        self.teller = teller
        self.grace = grace
        self.handled = False        # the failure of the ranks as they are now was dealt with
        self.task: asyncio.Task | None = None

    @property
    def server(self) -> str:
        return self.ranks[0].name

    @property
    def unsettled(self) -> bool:
        """A rank failed and the watch has not dealt with it yet (its cause found, the others stopped and told):
        the outcome waits. Looked at as it is, in the turn the failure came: the watch's own wake comes turns
        later."""
        if self.task is None:
            return False        # not watched (a look at how they run stops nothing)
        return not self.handled and any(r.state in FAILING for r in self.ranks)

    def start(self) -> None:
        self.task = asyncio.create_task(self._watch(), name=f"ranks of {self.server}")

    async def _watch(self) -> None:
        """Each time a rank fails: the rest stopped; then, once a retry or restart set every rank going again,
        watched anew."""
        while True:
            failed = await self._first(lambda run: run.state in FAILING)
            try:
                await self.take_down(await self._cause(failed))
            finally:
                self.handled = True
                self.teller.changed()
            await self._first(lambda run: all(r.state not in FAILING for r in self.ranks))
            self.handled = False

    async def _first(self, condition: Callable[[ServiceRun], bool]) -> ServiceRun:
        """The first rank for which ``condition`` holds, looked at on each rank's own steps."""
        waits = {asyncio.ensure_future(run.reaches(functools.partial(condition, run))): run for run in self.ranks}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        return waits[next(iter(done))]

    async def _cause(self, first: ServiceRun) -> ServiceRun:
        """The rank whose failure is the cause: ``first``, unless it says only that another rank went (gloo's peer
        closed, NCCL's watchdog); then the rank that fails within ``grace`` with a cause of its own, if one does
        (a dead rank's lines may come later than its peers', over another host's connection)."""
        if not first.serving.peer_lost(first.reason):
            return first

        def cause() -> ServiceRun | None:
            return next((r for r in self.ranks if r.state in FAILING and not r.serving.peer_lost(r.reason)), None)

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.grace):
                await self._first(lambda run: cause() is not None)
        return cause() or first

    async def take_down(self, failed: ServiceRun) -> None:
        """Every rank but ``failed`` stopped (a rank that failed too, once its unit still runs), rank 0 first, each
        told why; the server's failure said once."""
        others = [run for run in self.ranks if run is not failed and (
            run.state not in AT_REST or run.state in FAILING and run.running)]
        what = f"{rank_words(failed)} {failed.state.value.replace('_', ' ')}"
        why = f"its server's {what}"
        self.teller.emit(ServerFailed(self.server, failed.name, self.teller.elapsed()))
        fell = [run for run in self.ranks if run is not failed and run not in others and run.state in FAILING]
        if others:
            self._tell("error", f"{self.server}: {what}: stopping {', '.join(rank_words(r) for r in others)} too: a "
                                "rank cannot go on alone (the others wait in their next collective until it times "
                                "out) nor rejoin alone; a retry restarts every rank")
        elif fell:
            self._tell("error", f"{self.server}: {what}, and {', '.join(rank_words(r) for r in fell)} with it; a "
                                "retry restarts every rank")
        for run in others:
            if run.task is not None and not run.task.done():
                run.task.cancel()       # its wait or watch: what follows is the server's failure
            if run.state not in FAILING:
                run.transition(S.FAILED, why)
        for run in others:               # rank 0 first: its shutdown ends the others' schedulers
            await run.stop(why=why)

    def _tell(self, level: str, text: str) -> None:
        self.teller.emit(Notice(level, text, self.server, self.teller.elapsed()))
