"""The bring-up against each generation of SGLang the sim plays: the router is never started on a lie.

Every generation prints its ready line after a failed PD warm-up, and (2025 on)
answers /health 200 after it, as SGLang does: only the warm-up's failure line
tells. Lines that only look bad (a request's traceback) never fail a service.
"""

from __future__ import annotations

import asyncio

import pytest

from pdtui.engine.events import LogLines, Notice, ProbeResult
from pdtui.engine.orchestrator import Orchestrator
from pdtui.engine.states import ServiceState
from pdtui.hosts import make_host
from pdtui.sim.knobs import GENERATIONS
from pdtui.sim.sandbox import Sandbox
from pdtui.targets.registry import Registry
from tests.engine_helpers import FAST, Recorder, bring_up, reference

WARMUP_FAILED = {
    "older": "End of prefill warmup with status 400",
    "2025": "Prefill disaggregation mode warm Up Failed, status code: 400",
    "current": "Disaggregation warmup failed (mode=decode), status codes: [400]",
}




def router_never_started(sandbox: Sandbox, recorder: Recorder) -> bool:
    return "starting" not in recorder.states("router") and "sglang-dsv4-router.service" not in sandbox.store.started_names()


@pytest.mark.parametrize("generation", GENERATIONS)
async def test_a_failed_warm_up_fails_the_backend_whatever_health_says(sandbox, generation):
    done, rec, _ = await bring_up(reference(sandbox, failures={"decode": "warmup-failed"}, generation=generation))
    assert done.exit_code == 1
    failed = rec.change("decode", "failed")
    assert failed.reason == "PD warm-up failed" and WARMUP_FAILED[generation] in (failed.line or "")
    assert done.blocked["router"] == "decode failed"
    assert router_never_started(sandbox, rec)


@pytest.mark.parametrize("generation", GENERATIONS)
async def test_a_taken_bootstrap_port_fails_the_prefill_before_the_router_starts(sandbox, generation):
    done, rec, _ = await bring_up(reference(sandbox, failures={"prefill": "bootstrap-port-in-use"},
                                            generation=generation))
    assert done.exit_code == 1
    failed = rec.change("prefill", "failed")
    assert failed.reason == "bootstrap server failed" and "Server error: [Errno 98]" in (failed.line or "")
    assert done.blocked["router"] == "prefill failed"
    assert router_never_started(sandbox, rec)


@pytest.mark.parametrize("generation", GENERATIONS)
async def test_a_request_traceback_after_ready_leaves_the_service_ready(sandbox, generation):
    deployment = reference(sandbox, failures={"decode": "request-traceback"}, generation=generation)
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=FAST)
    orchestrator.subscribe(recorder)
    try:
        done = await orchestrator.run()
        assert done.ok, done
        await asyncio.wait_for(_line_seen(recorder, "decode", "Exception in ASGI application"), 20)
        # The exception line of the traceback, and a unit look after it: still nothing that fails.
        await asyncio.wait_for(_line_seen(recorder, "decode", "ValueError: Unknown message role"), 5)
        await asyncio.sleep(FAST.settle + FAST.unit_watch * 2)
    finally:
        await orchestrator.close()
    assert recorder.states("decode")[-1] == ServiceState.READY.value
    assert "failed" not in recorder.states("decode")


async def test_the_prefill_shows_its_bootstrap_check(sandbox):
    done, rec, _ = await bring_up(reference(sandbox))
    assert done.ok, done
    bootstrap = [e for e in rec.of(ProbeResult) if e.service == "prefill" and e.check == "bootstrap"]
    assert bootstrap and bootstrap[-1].ok and "accepting" in bootstrap[-1].detail


async def test_per_request_transfer_errors_fail_the_smoke_step_quoting_the_line(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, failures={"decode": "transfer-errors"}))
    assert done.exit_code == 1
    reason = rec.change("router", "failed").reason
    assert reason.startswith("smoke: ") and "decode: " in reason and "decode: KVTransferError: " in reason
    warnings = [n for n in rec.of(Notice) if n.service == "decode" and "KV transfer error" in n.text]
    assert warnings and warnings[0].text.startswith("decode: KV transfer error: ")
    assert rec.states("decode")[-1] == "ready"    # a per-request error is not the backend's failure


async def _line_seen(recorder: Recorder, service: str, text: str) -> None:
    while not any(isinstance(e, LogLines) and e.service == service and any(text in line.text for line in e.lines)
                  for e in recorder.events):
        await asyncio.sleep(0.05)
