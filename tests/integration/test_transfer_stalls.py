"""KV transfers that stall once serving (the sim worker's ``transfer-stalls``): warned of from the servers' own
transfer queues long before the engine's timeout, the router's canary failing on them, a drain that waits for a
prefill's requests held in its inflight queue; and no warning on a healthy deployment under load."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from pdtui.engine.checks import router as router_check
from pdtui.engine.events import Drained, Notice
from pdtui.engine.intent import Intent, Verb
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.hosts.http import HttpProber
from pdtui.hosts.local import LocalHost
from pdtui.sim.ports import free_port
from pdtui.targets.registry import Registry
from tests.engine_helpers import (
    FAST,
    READY_WITHIN,
    Recorder,
    bring_up,
    real_router_params,
    router_argv,
    sim_deployment,
    worker_argv,
)
from tests.integration.test_canary import watch_until
from tests.integration.test_router_workers import GENERATE, Traffic

METRICS = ("--enable-metrics",)
# A stall told after 5 s: a sim request under load can sit in a queue, with no request finishing, for a couple of
# seconds (a loaded test machine's threads); a stalled one stays for good.
WATCHED = dataclasses.replace(FAST, transfer_poll=0.3, transfer_stall=5.0)
STUCK = "stuck in KV transfer"


def pd(sandbox, package: str, *, stalls: str | None = None, canary: str = "30s", stalls_for: float | None = None):
    """prefill, decode (the one named by ``stalls`` stalling its routed transfers from 0.5 s after the first, for
    ``stalls_for`` seconds or for good), router."""
    p, d, r, boot = (free_port() for _ in range(4))
    window = ("--fail-after", "0.5", *(("--fail-for", f"{stalls_for:g}") if stalls_for else ()), *METRICS)

    def worker(role: str, port: int) -> list[str]:
        if role == stalls:
            return worker_argv(role, port, bootstrap=boot, fail="transfer-stalls", extra=window)
        return worker_argv(role, port, bootstrap=boot, extra=METRICS)

    return sim_deployment(sandbox, {
        "prefill": (worker("prefill", p), {"role": "prefill", "port": p, "timeout": READY_WITHIN}),
        "decode": (worker("decode", d), {"role": "decode", "port": d, "timeout": READY_WITHIN}),
        "router": (router_argv(r, [(p, boot)], [d], package=package),
                   {"role": "router", "port": r, "timeout": READY_WITHIN, "canary": canary}),
    }), r


@pytest.mark.parametrize("package", [*real_router_params(), "sim"])
async def test_a_decode_whose_transfers_stall_is_warned_of_naming_its_stage_and_the_canary_fails(
        sandbox, package, monkeypatch):
    monkeypatch.setattr(router_check, "GENERATION_TIMEOUT", 3.0)     # the canary's request: 30 s by default
    deployment, _ = pd(sandbox, package, stalls="decode", canary="1s")
    rec = await watch_until(deployment, lambda r: "degraded" in r.states("router")
                            and any(STUCK in n.text for n in r.of(Notice)), limit=60.0, timing=WATCHED)
    [warned] = [n for n in rec.of(Notice) if STUCK in n.text]
    assert (warned.service, warned.level) == ("decode", "warning")
    assert warned.text.startswith("decode: ") and " stuck in KV transfer for " in warned.text, warned.text
    assert ("none moving on: the decode side of its pairs, in its decode transfer queue (KVPoll.WaitingForInput: "
            "waiting for the prefill's KV)") in warned.text
    degraded = rec.change("router", "degraded")
    assert degraded.reason.startswith("canary failed: "), degraded.reason
    assert rec.states("decode")[-1] == "ready", "its health holds: only its transfers stall"


async def test_a_healthy_deployment_under_load_is_never_warned_of_stalled_transfers(sandbox):
    deployment, r = pd(sandbox, "sim")
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=WATCHED)
    orchestrator.subscribe(recorder)
    try:
        assert (await orchestrator.run()).ok
        with Traffic(r) as traffic:
            await asyncio.sleep(12.0)       # over twice the threshold, a look every 0.3 s
    finally:
        await orchestrator.close()
    assert traffic.tally.answered >= 10, traffic.out.getvalue()
    assert not [n.text for n in recorder.of(Notice) if STUCK in n.text]


async def test_a_drained_prefill_is_waited_for_while_its_inflight_queue_holds_requests_and_the_cut_says_so(sandbox):
    deployment, r = pd(sandbox, "sim", stalls="prefill", stalls_for=4.0)
    assert (await bring_up(deployment))[0].ok
    prober = HttpProber(LocalHost())
    await asyncio.sleep(1.0)
    # Three requests whose KV the prefill sent and no decode takes: the router waits on them. Those sent from
    # 4.5 s after the bring-up's generation move again (the restart's own proof among them).
    sent = [asyncio.create_task(prober.request("POST", r, "/generate", body={**GENERATE, "text": f"request {n}"},
                                               timeout=60)) for n in range(3)]
    await asyncio.sleep(4.0)
    try:
        done, rec, _ = await bring_up(deployment, intent=Intent(Verb.RESTART, ("prefill",), drain_timeout=2.0))
    finally:
        for request in sent:
            request.cancel()
        await asyncio.gather(*sent, return_exceptions=True)
    assert done.ok, done
    assert rec.of(Drained), [n.text for n in rec.of(Notice)]
    [drained] = rec.of(Drained)
    assert drained.idle_after is not None and drained.idle_after >= 2.0, "it waited for them to its timeout"
    assert (drained.cut, drained.cut_in_transfer) == (3, 3)
    assert "prefill: out of router; 3 requests still held at the drain's end (3 of them in a KV transfer): cut" in [
        n.text for n in rec.of(Notice)]
