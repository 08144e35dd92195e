"""The sim router's choice of a prefill and a decode for each request: every pair in turn, as the real routers,
which pick each side on its own, meet every pair."""

from __future__ import annotations

import pytest

from pdtui.sim.router import Pool, RouterLog, Worker


def pool(prefills: int, decodes: int) -> Pool:
    workers = [Worker(f"http://p{n}", "prefill", registered=True, healthy=True) for n in range(prefills)]
    workers += [Worker(f"http://d{n}", "decode", registered=True, healthy=True) for n in range(decodes)]
    return Pool(workers, RouterLog())


@pytest.mark.parametrize("prefills, decodes", [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3)])
def test_round_robin_meets_every_prefill_with_every_decode(prefills: int, decodes: int) -> None:
    chosen = pool(prefills, decodes)
    turns = prefills * decodes
    pairs = []
    for _ in range(turns):
        pair = chosen.pick()
        assert pair is not None
        pairs.append((pair[0].url, pair[1].url))
    assert set(pairs) == {(f"http://p{p}", f"http://d{d}") for p in range(prefills) for d in range(decodes)}


def test_no_pair_without_a_healthy_prefill() -> None:
    chosen = pool(1, 2)
    chosen.workers[0].healthy = False
    assert chosen.pick() is None
