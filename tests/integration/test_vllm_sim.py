"""vLLM's PD on the sim: its servers' stand-ins (pdtui/sim/vllm_worker.py) with NIXL between them, the real
vllm-router in front, brought up by pdtui on the systemd stand-in: ready and proven by the decode's own KV
series, its failures named from its own lines, a side-channel port two servers share refused before they start."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from pdtui.engine.events import Done, Notice, PairMatrix, ProbeResult
from pdtui.engine.intent import Intent
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.targets.registry import Registry
from tests.engine_helpers import FAST, Recorder, bring_up, reference

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm_router") is None,
                                reason="vllm-router is not installed (pip install vllm-router)")


def vllm(sandbox, **kwargs):
    return reference(sandbox, engine="vllm", **kwargs)


async def test_a_vllm_pair_behind_vllm_router_is_ready_and_its_kv_is_seen_moving_into_the_decode(sandbox):
    done, rec, _ = await bring_up(vllm(sandbox))
    assert done.ok, done
    checks = {p.check: p for p in rec.of(ProbeResult) if p.service == "router" and p.ok}
    assert checks["readiness"].detail.startswith('HTTP 200: {"status":"ready"')
    assert checks["workers"].detail == "2 of 2 backends healthy"
    assert checks["kv"].detail.startswith("KV moved prefill→decode, ") and checks["kv"].detail.endswith("into decode")
    units = sandbox.root / "units"
    prefill = (units / "vllm-dsv4-prefill.service").read_text()
    assert "Environment=VLLM_NIXL_SIDE_CHANNEL_PORT=" in prefill and 'kv_role\\":\\"kv_producer' in prefill
    assert "--vllm-pd-disaggregation" in (units / "vllm-dsv4-router.service").read_text()


async def test_every_vllm_pair_is_proven_by_its_two_legs(sandbox):
    done, rec, _ = await bring_up(vllm(sandbox, shape="1p2d"))
    assert done.ok, done
    [matrix] = [m for m in rec.of(PairMatrix) if m.service == "router"][-1:]
    assert {(p.prefill, p.decode, p.ok) for p in matrix.pairs} == {("prefill", "decode-0", True),
                                                                   ("prefill", "decode-1", True)}


async def test_a_server_whose_engine_core_fails_to_start_is_named_by_its_root_cause(sandbox):
    done, rec, _ = await bring_up(vllm(sandbox, failures={"decode": "block-size"}))
    assert not done.ok
    assert done.failures["decode"].startswith("--block-size does not suit the attention backend"), done.failures
    assert rec.states("router") == ["blocked"]


async def test_two_servers_given_one_side_channel_port_are_refused_before_either_starts(sandbox):
    done, rec, _ = await bring_up(vllm(sandbox, failures={"decode": "side-channel"}))
    assert not done.ok
    assert "both take NIXL side-channel port" in done.failures["prefill"]
    assert "starting" not in rec.states("prefill") and "starting" not in rec.states("decode")


async def test_forced_past_the_refusal_the_second_server_hangs_and_its_clash_is_named(sandbox):
    done, _, _ = await bring_up(vllm(sandbox, failures={"decode": "side-channel"}), intent=Intent(force=True))
    assert not done.ok
    failed = [reason for reason in done.failures.values() if "side-channel port" in reason]
    assert failed and "vLLM hangs rather than exits" in failed[0], done.failures


async def test_a_decode_restarted_behind_vllm_router_is_not_drained_and_says_why(sandbox):
    orchestrator = Orchestrator(vllm(sandbox), Registry(make_host), timing=FAST)
    recorder = Recorder()
    orchestrator.subscribe(recorder)
    try:
        assert (await orchestrator.run()).ok
        assert orchestrator.restart("decode")
        async with asyncio.timeout(30):
            while len(recorder.of(Done)) < 2:
                await asyncio.sleep(0.05)
    finally:
        await orchestrator.close()
    told = [n.text for n in recorder.of(Notice) if n.service == "decode"]
    assert any("not drained out of router: its worker API cannot put a worker back" in t for t in told), told
    assert recorder.of(Done)[-1].ok
    assert recorder.states("decode")[-4:] == ["pending", "starting", "waiting", "ready"]


def test_the_vllm_demo_reaches_ready_headless_and_leaves_nothing_running(tmp_path):
    import subprocess
    import sys

    from tests.conftest_sim import assert_nothing_left
    result = subprocess.run([sys.executable, "-m", "pdtui", "demo", "--engine", "vllm", "--headless", "--startup",
                             "0.5", "--no-load", "--sandbox", str(tmp_path / "sb")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the router is vllm-router" in result.stderr
    assert "all ready" in result.stdout and "kv: ok: KV moved prefill→decode" in result.stdout
    assert_nothing_left(tmp_path / "sb")


def test_the_vllm_demo_refuses_what_it_cannot_combine_with_in_one_line(capsys):
    from pdtui.cli import main
    assert main(["demo", "--engine", "vllm", "--slurm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pdtui: demo --engine vllm runs simulated vLLM servers behind vllm-router: not with --slurm"]
