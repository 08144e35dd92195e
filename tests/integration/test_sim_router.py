"""Two sim workers behind a PD router: each real router (smg, sglang-router) and pdtui's fallback router."""

from __future__ import annotations

import json
import sys

import pytest

from pdtui.sim.command_lines import router_argv
from pdtui.sim.knobs import DEFAULT_MODEL
from tests.conftest_sim import Procs, fetch, free_port, read_until, status, wait_until, worker_process_argv  # noqa: F401
from tests.engine_helpers import real_router_params

# The workers' own model: smg routes by it (another name is 503 "No prefill workers available");
# sglang-router and the sim router do not look at it.
CHAT = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
ROUTERS = [*real_router_params(), "sim"]
# The workers start with the router here: smg, finding one not up yet, tries again only after
# --worker-startup-check-interval (30 s by default; sglang-router retries after 1 s). The sim
# router ignores the flag, and --policy checks it ignores router flags it does not know.
ROUTER_FLAGS = ["--worker-startup-check-interval", "1", "--policy", "cache_aware"]


def start_router(procs: Procs, package: str, prefill: int, bootstrap: int, decode: int, port: int):
    return procs.start([*router_argv(port, [(prefill, bootstrap)], [decode], package=package), *ROUTER_FLAGS])


@pytest.fixture(params=ROUTERS)
def deployment(request, procs: Procs):
    """Two ready-to-be workers and a router in front of them; yields (router url, workers)."""
    p1, p2, p3, boot = free_port(), free_port(), free_port(), free_port()
    workers = [procs.start(worker_process_argv("prefill", p1, "--bootstrap-port", str(boot), startup=0.3)),
               procs.start(worker_process_argv("decode", p2, startup=0.3))]
    router = start_router(procs, request.param, p1, boot, p2, p3)
    yield f"http://127.0.0.1:{p3}", workers, router, (p1, p2, boot)


def test_router_becomes_ready_lists_both_workers_and_answers(deployment):
    url, workers, router, (p1, p2, boot) = deployment
    wait_until(lambda: status(url + "/health") == 200)
    wait_until(lambda: status(url + "/readiness") == 200, timeout=60, interval=0.1)
    readiness = json.loads(fetch(url + "/readiness")[1])
    assert readiness == {"status": "ready", "healthy_workers": 2, "total_workers": 2}
    listed = {w["url"]: w for w in json.loads(fetch(url + "/workers")[1])["workers"]}
    assert set(listed) == {f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{p2}"}
    assert all(w["is_healthy"] for w in listed.values())
    prefill = listed[f"http://127.0.0.1:{p1}"]
    assert prefill["worker_type"] == "prefill" and prefill["bootstrap_port"] == boot
    assert listed[f"http://127.0.0.1:{p2}"]["worker_type"] == "decode"
    code, body = fetch(url + "/v1/chat/completions", "POST", CHAT)
    assert code == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"].split() == ["The", "quick", "brown", "fox"]
    for worker in workers:   # each side saw the request, so the prefill got its bootstrap fields
        read_until(worker, '"POST /v1/chat/completions HTTP/1.1" 200 OK')


@pytest.mark.parametrize("package", ROUTERS)
def test_router_is_not_ready_while_a_worker_is_unhealthy(procs: Procs, package):
    p1, p2, p3, boot = free_port(), free_port(), free_port(), free_port()
    decode = procs.start(worker_process_argv("decode", p2, startup=0.2))
    prefill = procs.start(worker_process_argv("prefill", p1, "--fail", "hang", startup=0.2))   # never healthy
    start_router(procs, package, p1, boot, p2, p3)
    url = f"http://127.0.0.1:{p3}"
    read_until(decode, "fired up")
    read_until(prefill, "CUDA graph begin")
    wait_until(lambda: any(w["worker_type"] == "decode" and w["is_healthy"]
                           for w in json.loads(fetch(url + "/workers")[1] or b'{"workers":[]}')["workers"]))
    code, body = fetch(url + "/readiness")
    assert code == 503 and json.loads(body)["status"] == "not ready"
    assert status(url + "/health") == 200
    assert fetch(url + "/v1/chat/completions", "POST", CHAT)[0] == 503


@pytest.mark.parametrize("package", ROUTERS)
def test_an_api_key_guards_workers_and_generation_but_not_readiness(procs: Procs, package):
    p1, p2, p3, boot = free_port(), free_port(), free_port(), free_port()
    procs.start(worker_process_argv("prefill", p1, "--bootstrap-port", str(boot), startup=0.2))
    procs.start(worker_process_argv("decode", p2, startup=0.2))
    procs.start([*router_argv(p3, [(p1, boot)], [p2], package=package), *ROUTER_FLAGS, "--api-key", "s3cret"])
    url = f"http://127.0.0.1:{p3}"
    wait_until(lambda: status(url + "/readiness") == 200, timeout=60, interval=0.1)
    assert status(url + "/workers") == 401
    assert fetch(url + "/v1/chat/completions", "POST", CHAT)[0] == 401
    assert status(url + "/health") == 200 and status(url + "/v1/models") == 200
    code, body = fetch(url + "/workers", headers={"Authorization": "Bearer s3cret"})
    assert code == 200 and len(json.loads(body)["workers"]) == 2
    assert fetch(url + "/v1/chat/completions", "POST", CHAT, headers={"Authorization": "Bearer s3cret"})[0] == 200


def test_sim_router_rejects_non_pd_mode_in_one_line(procs: Procs):
    router = procs.start([sys.executable, "-m", "pdtui.sim.router", "--port", str(free_port())])
    _, err = router.communicate(timeout=30)
    assert router.returncode == 2 and err.strip().splitlines()[-1].endswith("only --pd-disaggregation mode is simulated")
