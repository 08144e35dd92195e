"""A ready decode the router will not take, named with why: its ``/server_info`` never answers (an SGLang scheduler
busy in PD bootstrap polling), against each real router and pdtui's stand-in, which must agree with them: each
times the worker's metadata out at 10 s and logs it, and pdtui asks the decode what the router asks, with the
router's limits, and quotes the router's line."""

from __future__ import annotations

import pytest

from pdtui.engine.events import ProbeResult
from pdtui.sim.command_lines import SIM_ROUTER
from pdtui.sim.ports import free_port
from tests.engine_helpers import READY_WITHIN, bring_up, real_router_params, router_argv, sim_deployment, worker_argv


@pytest.fixture(params=[*real_router_params(), SIM_ROUTER])
def router(request) -> str:
    return request.param


async def test_a_decode_whose_server_info_never_answers_is_named_missing_with_why(sandbox, router):
    p, d, r, boot = (free_port() for _ in range(4))
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot), {"role": "prefill", "port": p, "timeout": READY_WITHIN}),
        "decode": (worker_argv("decode", d, bootstrap=boot, fail="server-info-hangs"),
                   {"role": "decode", "port": d, "timeout": READY_WITHIN}),
        # the reason is known some 16 s after the router starts: 5 s for the router to take the decode, 10 s for
        # /server_info to time out as the router's does
        "router": (router_argv(r, [(p, boot)], [d], package=router), {"role": "router", "port": r, "timeout": "30s"}),
    }
    done, rec, _ = await bring_up(sim_deployment(sandbox, services), smoke=False)
    assert not done.ok and rec.states("decode")[-1] == "ready", "the decode is ready by its own checks"
    timed_out = rec.change("router", "timed_out")
    why = (f"workers (missing: decode; decode: the router's metadata read (GET /server_info at http://127.0.0.1:{d}): "
           "no answer within 10 s, the router's limit; next: SGLang answers /server_info from its scheduler")
    assert why in timed_out.reason, timed_out.reason
    assert 'step_id=discover_metadata error="Step timeout after 10s"' in timed_out.reason, "the router's own line"
    workers = [e for e in rec.of(ProbeResult) if e.service == "router" and e.check == "workers"]
    assert workers[0].detail.startswith("missing: ") and "; decode: " not in workers[0].detail, \
        "asked only once the router has had the time to take it"
