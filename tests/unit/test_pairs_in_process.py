"""Every prefill × decode pair proven directly, in this process on memory hosts and a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from pdtui.engine.events import PairMatrix, PairResult, ProbeResult
from pdtui.engine.orchestrator import Orchestrator
from pdtui.faces.pair_matrix import matrix_lines
from pdtui.faces.status_table import StatusBoard
from pdtui.sim.memhost import MemoryFleet
from pdtui.targets.registry import Registry
from tests.engine_helpers import Recorder, pd_deployment

pytestmark = pytest.mark.looptime


def deployment(prefills: int, decodes: int):
    """xPyD on two hosts: prefills on gpu0, decodes on gpu1, the router on gpu0 in front of all."""
    return pd_deployment(
        {f"prefill-{n}": {"unit": f"p{n}", "gpus": [2 * n, 2 * n + 1], "port": 30000 + n, "bootstrap_port": 8998 + n}
         for n in range(prefills)},
        {f"decode-{n}": {"host": "gpu1", "unit": f"d{n}", "gpus": [2 * n, 2 * n + 1], "port": 30100 + n}
         for n in range(decodes)},
        router={"timeout": "2m"}, name="pairs", timeout="5m",
        hosts={"gpu0": {"address": "gpu0.internal"}, "gpu1": {"address": "gpu1.internal"}})


async def bring_up(prefills: int, decodes: int, *, broken=(), pairs: bool | None = None):
    config = deployment(prefills, decodes)
    fleet = MemoryFleet(config, startup=30.0, router_startup=2.0)
    fleet.broken_pairs |= set(broken)
    orchestrator = Orchestrator(config, Registry(fleet.host), clock=asyncio.get_running_loop().time, pairs=pairs)
    rec = Recorder()
    board = StatusBoard()
    orchestrator.subscribe(rec)
    orchestrator.subscribe(board)
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
        fleet.stop_all()
    return done, rec, board, fleet


def pair_checks(rec: Recorder) -> list[ProbeResult]:
    return [e for e in rec.of(ProbeResult) if e.check == "pairs"]


async def test_every_pair_of_a_2p2d_deployment_is_proven_before_the_router_is_ready():
    done, rec, board, fleet = await bring_up(2, 2)
    assert done.ok, done
    assert pair_checks(rec)[-1].detail == "4 of 4 pairs proven by their tokens"
    matrix = rec.of(PairMatrix)[-1]
    assert {(p.prefill, p.decode) for p in matrix.pairs} == {(f"prefill-{p}", f"decode-{d}") for p in (0, 1)
                                                               for d in (0, 1)}
    assert all(p.ok for p in matrix.pairs)
    assert fleet.counts["http /generate"] == 8, "one request to each side of each pair"
    assert rec.index("router", "ready") > rec.events.index(matrix)


async def test_a_pair_that_cannot_transfer_is_named_and_the_bring_up_fails():
    done, rec, board, fleet = await bring_up(2, 2, broken={("prefill-0", "decode-1")})
    assert done.exit_code == 1
    reason = done.failures["router"]
    assert reason == ("pairs: decode-1 ✗ prefill-0: KV transfer failed: decode-1: KVTransferError: Failed to get "
                      "kvcache from prefill instance, it might be dead"), reason
    assert "decode-0 ✗" not in reason and "prefill-1" not in reason
    pairs = board.services["router"].pairs
    assert [(p.prefill, p.decode, p.ok) for p in pairs] == [
        ("prefill-0", "decode-0", True), ("prefill-0", "decode-1", False),
        ("prefill-1", "decode-0", True), ("prefill-1", "decode-1", True)]
    # three rounds before a pair is given up on: all four pairs, then the broken one twice (two requests each)
    assert fleet.counts["http /generate"] == 4 * 2 + 2 * 2


async def test_a_single_pair_is_the_smokes_own_path_unless_asked():
    done, rec, _, fleet = await bring_up(1, 1)
    assert done.ok and not pair_checks(rec) and fleet.counts["http /generate"] == 0
    done, rec, _, fleet = await bring_up(1, 1, pairs=True)
    assert done.ok and pair_checks(rec)[-1].detail == "1 of 1 pairs proven by their tokens"


async def test_no_pairs_skips_them_even_with_several():
    done, rec, _, fleet = await bring_up(1, 2, pairs=False)
    assert done.ok and not pair_checks(rec) and fleet.counts["http /generate"] == 0


async def test_the_pairs_are_proven_again_on_demand_once_ready():
    config = deployment(1, 2)
    fleet = MemoryFleet(config, startup=30.0, router_startup=2.0)
    orchestrator = Orchestrator(config, Registry(fleet.host), clock=asyncio.get_running_loop().time)
    rec = Recorder()
    orchestrator.subscribe(rec)
    try:
        assert (await orchestrator.run()).ok
        fleet.broken_pairs.add(("prefill-0", "decode-0"))     # its decode restarted; the prefill kept stale state
        assert orchestrator.prove_pairs()
        while len(rec.of(PairMatrix)) < 2:
            await asyncio.sleep(0.5)
    finally:
        await orchestrator.close()
        fleet.stop_all()
    again = rec.of(PairMatrix)[-1]
    assert [(p.decode, p.ok) for p in again.pairs] == [("decode-0", False), ("decode-1", True)]
    told = pair_checks(rec)[-1]
    assert not told.ok and told.detail.startswith("decode-0 ✗ prefill-0: KV transfer failed: ")


def test_the_matrix_marks_each_pair_and_says_why_one_failed():
    pairs = [PairResult("prefill-0", "decode-0", True, "4 tokens"),
             PairResult("prefill-0", "decode-1", False, "HTTP 500: \x1b[31mno KV"),
             PairResult("prefill-1", "decode-0", True, "4 tokens"), PairResult("prefill-1", "decode-1", True, "ok")]
    assert matrix_lines(pairs) == ["pairs      decode-0  decode-1",
                                   "prefill-0  ✓         ✗",
                                   "prefill-1  ✓         ✓",
                                   "decode-1 ✗ prefill-0: HTTP 500: no KV"]


def test_status_once_prints_the_routers_matrix_under_the_table_and_in_its_json():
    import json

    from pdtui.engine.events import PlanReady, ServiceInfo, Step
    board = StatusBoard()
    info = ServiceInfo("router", "router", "r", "gpu0", (), None, 8000, ("prefill-0", "decode-0", "decode-1"), 60.0)
    board(PlanReady("pairs", (info,), tuple(Step)))
    board(PairMatrix("router", (PairResult("prefill-0", "decode-0", True, "4 tokens", 0.1),
                                PairResult("prefill-0", "decode-1", False, "HTTP 500: no KV", 0.1)), 9.0))
    assert board.table().splitlines()[-4:] == ["",
                                               "router pairs      decode-0  decode-1",
                                               "       prefill-0  ✓         ✗",
                                               "       decode-1 ✗ prefill-0: HTTP 500: no KV"]
    [router] = json.loads(board.as_json())["services"]
    assert router["pairs"] == [{"prefill": "prefill-0", "decode": "decode-0", "ok": True, "detail": "4 tokens"},
                               {"prefill": "prefill-0", "decode": "decode-1", "ok": False, "detail": "HTTP 500: no KV"}]
