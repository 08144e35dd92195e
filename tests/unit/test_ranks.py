"""A server's ranks judged as one (engine/ranks.py), with stand-in runs: which rank is blamed, which are stopped."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

from pdtui.engine.events import Notice, ServerFailed
from pdtui.engine.ranks import RankWatch
from pdtui.engine.states import ServiceState
from pdtui.servers import default_serving

S = ServiceState
GLOO = "after ready: scheduler crashed (TP0): RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] " \
       "Connection closed by peer [10.0.0.2]:45623"
CRASH = "after ready: scheduler crashed (TP8): RuntimeError: CUDA error: an illegal memory access was encountered"


@dataclass
class Rank:
    """What RankWatch asks of a run: its state and reason, its steps, its stop."""

    name: str
    rank: int
    host: str
    state: ServiceState = S.READY
    reason: str = ""
    running: bool = True
    stopped: list[str] = field(default_factory=list)       # the order the watch stopped ranks in, shared
    task: asyncio.Task | None = None
    serving = default_serving()

    def __post_init__(self) -> None:
        self.cfg = SimpleNamespace(rank=self.rank, host=self.host)
        self.changed = asyncio.Event()

    def transition(self, new: ServiceState, reason: str = "") -> None:
        self.state, self.reason = new, reason
        self.changed.set()

    async def reaches(self, condition) -> None:
        while not condition():
            self.changed.clear()
            await self.changed.wait()

    async def stop(self, *, why: str = "") -> None:
        self.stopped.append(self.name)
        self.running = False
        self.transition(S.STOPPED, f"stopped: {why}")


class Teller:
    def __init__(self) -> None:
        self.told: list[Notice] = []
        self.blamed: list[str] = []         # each ServerFailed's cause

    def emit(self, event) -> None:
        if isinstance(event, ServerFailed):
            self.blamed.append(event.cause)
        else:
            self.told.append(event)

    def elapsed(self) -> float:
        return 0.0

    def changed(self) -> None:
        pass


def server(count: int = 3) -> tuple[list[Rank], RankWatch, Teller]:
    order: list[str] = []
    ranks = [Rank("decode" if r == 0 else f"decode@{r}", r, f"gpu-{r}", stopped=order) for r in range(count)]
    teller = Teller()
    return ranks, RankWatch(ranks, teller, grace=0.5), teller   # type: ignore[arg-type]


async def settle(watch: RankWatch) -> None:
    async with asyncio.timeout(5):
        while watch.unsettled:
            await asyncio.sleep(0.01)


async def test_a_failed_rank_stops_every_other_rank_rank_0_first():
    ranks, watch, teller = server()
    watch.start()
    ranks[2].transition(S.FAILED, CRASH)
    assert watch.unsettled          # at once, before the watch has woken: the outcome waits
    await settle(watch)
    assert ranks[0].stopped == ["decode", "decode@1"]
    assert ranks[0].reason == "stopped: its server's rank 2 on gpu-2 failed"
    assert ranks[2].state is S.FAILED and ranks[2].reason == CRASH
    assert [n.text for n in teller.told][0].startswith("decode: rank 2 on gpu-2 failed: stopping rank 0 on gpu-0, "
                                                       "rank 1 on gpu-1 too")
    watch.task.cancel()


async def test_a_rank_that_failed_only_because_a_peer_went_is_not_blamed_when_the_peer_says_why():
    ranks, watch, teller = server(2)
    watch.start()
    ranks[0].transition(S.FAILED, GLOO)     # rank 0's lines came first
    await asyncio.sleep(0.05)
    ranks[1].transition(S.FAILED, CRASH)    # the cause, later over its own connection
    await settle(watch)
    assert teller.told[0].text.startswith("decode: rank 1 on gpu-1 failed: stopping rank 0 on gpu-0 too")
    assert teller.blamed == ["decode@1"]    # the panel's rank to speak for the server
    assert ranks[0].stopped == ["decode"]   # its unit still ran
    watch.task.cancel()


async def test_a_peer_lost_failure_with_no_other_cause_is_blamed_itself_after_the_grace():
    ranks, watch, teller = server(2)
    watch.start()
    ranks[1].transition(S.FAILED, GLOO)
    await settle(watch)
    assert teller.told[0].text.startswith("decode: rank 1 on gpu-1 failed: stopping rank 0 on gpu-0 too")
    watch.task.cancel()


async def test_ranks_already_down_are_named_not_stopped():
    ranks, watch, teller = server(2)
    ranks[0].running = False
    watch.start()
    ranks[0].transition(S.FAILED, GLOO)
    ranks[1].transition(S.FAILED, CRASH)
    await settle(watch)
    assert ranks[0].stopped == [] and ranks[0].state is S.FAILED
    assert teller.told[0].text == ("decode: rank 1 on gpu-1 failed, and rank 0 on gpu-0 with it; a retry restarts "
                                   "every rank")
    watch.task.cancel()


async def test_unwatched_ranks_are_never_held_nor_stopped():
    ranks, watch, _ = server(2)
    ranks[1].transition(S.FAILED, CRASH)
    assert not watch.unsettled and ranks[0].stopped == []
