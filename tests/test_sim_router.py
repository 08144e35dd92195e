"""Two sim workers behind a PD router: the real sglang-router, and pdtui's fallback router."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest_sim import Procs, fetch, free_port, procs, read_until, status, wait_until, worker_argv  # noqa: F401

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}


def real_router(prefill: int, bootstrap: int, decode: int, port: int) -> list[str]:
    pytest.importorskip("sglang_router")
    return [sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
            "--prefill", f"http://127.0.0.1:{prefill}", str(bootstrap), "--decode", f"http://127.0.0.1:{decode}",
            "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]   # default 29000 may be taken


def sim_router(prefill: int, bootstrap: int, decode: int, port: int) -> list[str]:
    return [sys.executable, "-m", "pdtui.sim.router", "--pd-disaggregation",
            "--prefill", f"http://127.0.0.1:{prefill}", str(bootstrap), "--decode", f"http://127.0.0.1:{decode}",
            "--host", "127.0.0.1", "--port", str(port), "--policy", "cache_aware"]


@pytest.fixture(params=[real_router, sim_router], ids=["sglang-router", "sim-router"])
def deployment(request, procs: Procs):
    """Two ready-to-be workers and a router in front of them; yields (router url, workers)."""
    p1, p2, p3, boot = free_port(), free_port(), free_port(), free_port()
    workers = [procs.start(worker_argv("prefill", p1, "--bootstrap-port", str(boot), startup=0.3)),
               procs.start(worker_argv("decode", p2, startup=0.3))]
    router = procs.start(request.param(p1, boot, p2, p3))
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


@pytest.mark.parametrize("router_argv", [real_router, sim_router], ids=["sglang-router", "sim-router"])
def test_router_is_not_ready_while_a_worker_is_unhealthy(procs: Procs, router_argv):
    p1, p2, p3, boot = free_port(), free_port(), free_port(), free_port()
    decode = procs.start(worker_argv("decode", p2, startup=0.2))
    prefill = procs.start(worker_argv("prefill", p1, "--fail", "hang", startup=0.2))   # never healthy
    procs.start(router_argv(p1, boot, p2, p3))
    url = f"http://127.0.0.1:{p3}"
    read_until(decode, "fired up")
    read_until(prefill, "CUDA graph begin")
    wait_until(lambda: any(w["worker_type"] == "decode" and w["is_healthy"]
                           for w in json.loads(fetch(url + "/workers")[1] or b'{"workers":[]}')["workers"]))
    code, body = fetch(url + "/readiness")
    assert code == 503 and json.loads(body)["status"] == "not ready"
    assert status(url + "/health") == 200
    assert fetch(url + "/v1/chat/completions", "POST", CHAT)[0] == 503


def test_sim_router_rejects_non_pd_mode_in_one_line(procs: Procs):
    router = procs.start([sys.executable, "-m", "pdtui.sim.router", "--port", str(free_port())])
    _, err = router.communicate(timeout=30)
    assert router.returncode == 2 and err.strip().splitlines()[-1].endswith("only --pd-disaggregation mode is simulated")
