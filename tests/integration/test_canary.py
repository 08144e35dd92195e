"""After ready, the router's canary: one tiny generation through it every ``canary`` interval, against each real
router and pdtui's stand-in. A failing canary degrades the router; one that passes again restores it."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from pdtui.engine.events import CanaryResult, Done, Notice, StateChanged
from pdtui.engine.orchestrator import Orchestrator
from pdtui.engine.timing import Timing
from pdtui.hosts import make_host
from pdtui.sim.ports import free_port
from pdtui.targets.registry import Registry
from tests.engine_helpers import (
    FAST,
    READY_WITHIN,
    Recorder,
    real_router_params,
    router_argv,
    sim_deployment,
    worker_argv,
)

ROUTERS = [*real_router_params(), "sim"]


def flaky_pd(sandbox, package, *, fail_after: float, fail_for: float, canary: str = "0.5s"):
    """prefill, decode whose generations fail for ``fail_for`` seconds from ``fail_after`` after ready, router."""
    p, d, r, boot = (free_port() for _ in range(4))
    window = ("--fail-after", f"{fail_after:g}", "--fail-for", f"{fail_for:g}")
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot), {"role": "prefill", "port": p, "timeout": READY_WITHIN}),
        "decode": (worker_argv("decode", d, bootstrap=boot, fail="generate-fails-later", extra=window),
                   {"role": "decode", "port": d, "timeout": READY_WITHIN}),
        # The real routers' circuit breaker keeps a failing worker out for --cb-timeout-duration-secs (60 s by
        # default) after it recovers: the canary says so (HTTP 503, no available workers) until then.
        "router": ([*router_argv(r, [(p, boot)], [d], package=package), "--cb-timeout-duration-secs", "2"],
                   {"role": "router", "port": r, "timeout": READY_WITHIN, "canary": canary}),
    }
    return sim_deployment(sandbox, services)


async def watch_until(deployment, condition, *, canary: bool = True, limit: float = 90.0,
                      timing: Timing = FAST) -> Recorder:
    """Bring up and keep watching until ``condition(recorder)`` holds (or ``limit`` seconds pass)."""
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=timing, canary=canary)
    orchestrator.subscribe(recorder)
    try:
        done = await orchestrator.run()
        assert done.ok, done.failures
        async with asyncio.timeout(limit):
            while not condition(recorder):
                await asyncio.sleep(0.05)
    finally:
        await orchestrator.close()
    return recorder


def canaries(recorder: Recorder) -> list[CanaryResult]:
    return [e for e in recorder.of(CanaryResult) if e.service == "router"]


@pytest.mark.parametrize("package", ROUTERS)
async def test_a_failing_canary_degrades_the_router_and_a_passing_one_restores_it(sandbox, package):
    deployment = flaky_pd(sandbox, package, fail_after=1.0, fail_for=3.0)
    rec = await watch_until(deployment, lambda r: r.states("router")[-2:] == ["degraded", "ready"])
    assert rec.states("router")[-3:] == ["ready", "degraded", "ready"]
    assert rec.states("decode")[-1] == "ready", "the decode server itself stays ready: only its generations fail"
    degraded = rec.change("router", "degraded")
    assert degraded.reason.startswith("canary failed: HTTP 5"), degraded.reason
    restored = [e for e in rec.events if getattr(e, "service", None) == "router"
                and getattr(e, "new", None) is not None and e.new.value == "ready"][-1]
    assert restored.reason.startswith("canary passes again: 4 tokens in ")
    assert restored.time_to_ready is None, "a recovery is not a new time to ready"
    results = canaries(rec)
    assert not all(c.ok for c in results) and results[-1].ok
    assert all(c.latency is not None for c in results if c.ok)
    assert len(rec.of(Done)) == 1, "the canary's verdict is not a new outcome of the bring-up"


async def test_canaries_keep_passing_on_a_healthy_deployment(sandbox):
    deployment = flaky_pd(sandbox, "sim", fail_after=3600, fail_for=1)
    rec = await watch_until(deployment, lambda r: len(canaries(r)) >= 3)
    assert all(c.ok and c.detail.startswith("4 tokens in ") for c in canaries(rec))
    assert "degraded" not in rec.states("router")


async def test_no_canary_sends_none(sandbox):
    deployment = flaky_pd(sandbox, "sim", fail_after=0.2, fail_for=30)
    # The decode answers 500 from 0.2 s after ready: a canary every 0.5 s would have degraded the router by the
    # time the decode has logged a few batch lines more.
    rec = await watch_until(deployment, lambda r: sum(len(e.lines) for e in r.events
                                                      if getattr(e, "service", None) == "decode"
                                                      and hasattr(e, "lines")) > 30, canary=False)
    assert not canaries(rec)
    assert rec.states("router")[-1] == "ready"


@pytest.mark.parametrize("package", ROUTERS)
async def test_transfers_failing_after_ready_degrade_the_router_naming_the_error_and_warn_from_the_figures(
        sandbox, package):
    p, d, r, boot = (free_port() for _ in range(4))
    window = ("--fail-after", "1", "--fail-for", "3", "--enable-metrics")
    deployment = sim_deployment(sandbox, {
        "prefill": (worker_argv("prefill", p, bootstrap=boot, extra=("--enable-metrics",)),
                    {"role": "prefill", "port": p, "timeout": READY_WITHIN}),
        "decode": (worker_argv("decode", d, bootstrap=boot, fail="transfer-errors-later", extra=window),
                   {"role": "decode", "port": d, "timeout": READY_WITHIN}),
        "router": ([*router_argv(r, [(p, boot)], [d], package=package), "--cb-timeout-duration-secs", "2"],
                   {"role": "router", "port": r, "timeout": READY_WITHIN, "canary": "0.5s"}),
    })
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=dataclasses.replace(FAST, figures_poll=0.2))
    orchestrator.subscribe(recorder)
    try:
        assert (await orchestrator.run()).ok
        orchestrator.show_figures(["decode"])
        async with asyncio.timeout(60):
            while not ("degraded" in recorder.states("router") and any(
                    "KV transfers failing" in n.text for n in recorder.of(Notice))):
                await asyncio.sleep(0.05)
    finally:
        await orchestrator.close()
    degraded = recorder.change("router", "degraded")
    assert degraded.reason.startswith("canary failed: "), degraded.reason
    assert "decode" not in [e.service for e in recorder.of(StateChanged) if e.new.value == "failed"]
    warned = next(n for n in recorder.of(Notice) if "KV transfers failing" in n.text)
    assert warned.level == "warning" and warned.text.startswith("decode: KV transfers failing: ")
