"""The router's end-to-end probe in PD mode in front of sim workers, against each real router (smg and
sglang-router, each skipped when not installed) and, for what needs a router flag, pdtui's stand-in too."""

from __future__ import annotations

import re

import pytest

from pdtui.engine.checks.workers import Backend, check_workers, key_refused
from pdtui.engine.events import Notice, PreflightFinding, ProbeResult
from pdtui.sim.ports import free_port
from pdtui.vocabulary.checks import LOOPBACK
from tests.engine_helpers import bring_up, real_router_params, router_argv, sim_deployment, worker_argv


def pd(sandbox, package, *, decode_fail=None, extra_decode=False, router_decodes=None, router_timeout="60s",
       router_flags=(), router_after=None, generation=None, metrics=False, router_key_env=None):
    """prefill + decode (+ a second decode) and the router; the router is told about ``router_decodes``.

    The router's timeout covers its start and, for a smoke that fails, three failed generations, each waiting a
    crash's cause time for a backend's transfer line: 9 s alone, twice that on a loaded machine. The backends get
    60 s too: a sim worker's start took more than 20 s once while a real vLLM pair came up beside it."""
    p, d, d2, r, boot = (free_port() for _ in range(5))
    extra = ("--enable-metrics",) if metrics else ()
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot, generation=generation, extra=extra),
                    {"role": "prefill", "port": p, "timeout": "60s"}),
        "decode": (worker_argv("decode", d, bootstrap=boot, fail=decode_fail, generation=generation, extra=extra),
                   {"role": "decode", "port": d, "timeout": "60s"}),
    }
    if extra_decode:
        services["decode2"] = (worker_argv("decode", d2, bootstrap=boot), {"role": "decode", "port": d2})
    told = router_decodes(d, d2) if router_decodes else [d]
    services["router"] = ([*router_argv(r, [(p, boot)], told, package=package), *router_flags],
                          {"role": "router", "port": r, "timeout": router_timeout,
                           **({"after": router_after} if router_after else {}),
                           **({"api_key_env": router_key_env} if router_key_env else {})})
    return sim_deployment(sandbox, services)


def probes(recorder, check):
    return [e for e in recorder.of(ProbeResult) if e.service == "router" and e.check == check]


# One prefill healthy and one decode down, as each router lists them (trimmed from real answers).
SGLANG_ROUTER_WORKERS = {"workers": [
    {"url": "http://127.0.0.1:30000", "worker_type": "prefill", "is_healthy": True, "bootstrap_port": 8998,
     "metadata": {"disaggregation_mode": "prefill"}, "connection_mode": "HTTP"},
    {"url": "http://127.0.0.1:30002", "worker_type": "decode", "is_healthy": False,
     "metadata": {"disaggregation_mode": "decode"}, "connection_mode": "HTTP"}],
    "total": 2, "stats": {"prefill_count": 1, "decode_count": 1, "regular_count": 0}}
SMG_WORKERS = {"workers": [
    {"url": "http://127.0.0.1:30002", "worker_type": "decode", "is_healthy": False, "status": "not_ready",
     "labels": {"disaggregation_mode": "decode"}, "connection_mode": "http", "runtime_type": "sglang"},
    {"url": "http://127.0.0.1:30000", "worker_type": "prefill", "is_healthy": True, "status": "ready",
     "bootstrap_port": 8998, "labels": {"disaggregation_mode": "prefill"}, "connection_mode": "http"}],
    "total": 2, "stats": {"prefill_count": 1, "decode_count": 1, "regular_count": 0}}
STATUS_ONLY_WORKERS = [{"url": "http://localhost:30000", "status": "ready"},
                       {"url": "http://localhost:30002", "status": "not_ready"}]


@pytest.mark.parametrize("payload", [SGLANG_ROUTER_WORKERS, SMG_WORKERS, STATUS_ONLY_WORKERS],
                         ids=["sglang-router", "smg", "status-only"])
def test_workers_are_read_alike_from_either_router(payload):
    backends = [Backend("prefill", "prefill", 30000, frozenset(LOOPBACK)),
                Backend("decode", "decode", 30002, frozenset(LOOPBACK))]
    check = check_workers(payload, backends)
    assert not check.ok and check.detail == "unhealthy: decode"


async def test_smoke_answer_through_the_pd_path(sandbox, real_router):
    done, rec, _ = await bring_up(pd(sandbox, real_router))
    assert done.ok, done
    smoke = probes(rec, "smoke")[-1]
    assert smoke.ok and smoke.latency is not None
    assert re.fullmatch(r"4 tokens in \d+ ms for a 154-token prompt \(finish length, 'The quick brown fox' in "
                        r"content\)", smoke.detail), smoke.detail
    kv = probes(rec, "kv")[-1]
    assert kv.ok and kv.detail == "KV path proven by tokens only (no server exports its KV transfer series)"
    assert probes(rec, "workers")[-1].detail == "2 of 2 backends healthy"


async def test_the_smoke_sees_kv_move_in_the_prefills_series(sandbox, real_router):
    done, rec, _ = await bring_up(pd(sandbox, real_router, metrics=True))
    assert done.ok, done
    kv = probes(rec, "kv")[-1]
    # the sim's prefill (pages of one token): a 154-token prompt of 0.0686 MB a token, as its only transfer
    assert kv.ok and kv.detail == "KV moved prefill→decode, 11 MB from prefill", kv.detail


@pytest.mark.parametrize("generation", ["older", "current"], ids=["content-null", "content-empty"])
async def test_a_reasoning_only_answer_passes_the_smoke(sandbox, real_router, generation):
    done, rec, _ = await bring_up(pd(sandbox, real_router, decode_fail="reasoning-only", generation=generation))
    assert done.ok, done
    smoke = probes(rec, "smoke")[-1]
    assert smoke.detail.endswith("(finish length, 'The quick brown fox' in reasoning_content)"), smoke.detail


async def test_an_http_200_without_tokens_fails_the_smoke_quoting_it(sandbox, real_router):
    done, rec, _ = await bring_up(pd(sandbox, real_router, decode_fail="empty-200"))
    assert not done.ok
    failed = rec.change("router", "failed")
    assert failed.reason.startswith("smoke: HTTP 200, finish_reason 'abort' after 0 tokens: {\"choice\":")
    assert '"completion_tokens":0' in failed.reason


async def test_a_backend_the_routers_unit_does_not_name_is_added_through_its_api_once_ready(sandbox, real_router):
    done, rec, _ = await bring_up(pd(sandbox, real_router, extra_decode=True))
    assert done.ok, done
    said = [n.text for n in rec.of(Notice) if n.service == "router"]
    assert any(t.startswith("router: its unit does not send to decode2 (its --decode URLs: http://127.0.0.1:")
               for t in said), said
    assert "router: decode2 is not among its workers (its unit does not name it): added through its worker API" in said
    assert probes(rec, "workers")[-1].detail == "3 of 3 backends healthy"


def test_a_configured_backend_the_router_does_not_list_is_named_missing():
    from pdtui.engine.checks.workers import Backend, check_workers
    loopback = frozenset({"127.0.0.1"})
    backends = [Backend("prefill", "prefill", 30000, loopback), Backend("decode2", "decode", 30012, loopback)]
    check = check_workers(SMG_WORKERS, backends)
    assert not check.ok and check.detail == "missing: decode2"


async def test_no_healthy_pair_keeps_readiness_503(sandbox, real_router):
    nowhere = free_port()
    # The config knows no decode for it (so no drift to refuse), the router's unit one that is not there.
    deployment = pd(sandbox, real_router, router_decodes=lambda d, d2: [nowhere], router_timeout="10s",
                    router_after=["prefill"])
    done, rec, _ = await bring_up(deployment, smoke=False)
    assert rec.states("router")[-1] == "timed_out"
    readiness = probes(rec, "readiness")[-1]
    assert not readiness.ok and readiness.detail.startswith("HTTP 503")
    assert not probes(rec, "smoke")


async def test_failing_generation_fails_the_smoke_step(sandbox, real_router):
    done, rec, _ = await bring_up(pd(sandbox, real_router, decode_fail="generate-500"))
    assert not done.ok
    failed = rec.change("router", "failed")
    assert failed.reason.startswith("smoke: HTTP 5")
    assert done.failures["router"] == failed.reason


async def test_no_smoke_skips_the_generation(sandbox, real_router):
    done, rec, _ = await bring_up(pd(sandbox, real_router, decode_fail="generate-500"), smoke=False)
    assert done.ok
    assert not probes(rec, "smoke")


@pytest.mark.parametrize("package", [*real_router_params(), "sim"])
async def test_workers_behind_an_api_key_fail_the_router_at_once_naming_the_key(sandbox, package):
    done, rec, _ = await bring_up(pd(sandbox, package, router_flags=("--api-key", "s3cret"), router_timeout="30s"))
    # A 401 is final: the router fails on its first look at /workers, never looked at again nor left to time out.
    assert rec.states("router")[-1] == "failed" and "timed_out" not in rec.states("router")
    workers = probes(rec, "workers")
    assert len(workers) == 1 and not workers[0].ok and workers[0].detail == f"HTTP 401 from /workers: {key_refused(None)}"
    assert done.failures["router"].startswith("workers: HTTP 401") and "api_key_env" in done.failures["router"]


@pytest.mark.parametrize("package", [*real_router_params(), "sim"])
async def test_a_router_with_an_api_key_is_proven_with_the_key_the_config_names(sandbox, package, monkeypatch):
    monkeypatch.setenv("PDTUI_TEST_ROUTER_KEY", "s3cret")
    done, rec, _ = await bring_up(pd(sandbox, package, router_flags=("--api-key", "s3cret"),
                                     router_key_env="PDTUI_TEST_ROUTER_KEY"))
    assert done.ok, done
    assert probes(rec, "workers")[-1].ok and probes(rec, "smoke")[-1].ok


@pytest.mark.parametrize("package", [*real_router_params(), "sim"])
async def test_a_key_the_router_refuses_is_named_by_where_it_came_from(sandbox, package, monkeypatch):
    monkeypatch.setenv("PDTUI_TEST_ROUTER_KEY", "not-the-key")
    done, _, _ = await bring_up(pd(sandbox, package, router_flags=("--api-key", "s3cret"),
                                   router_key_env="PDTUI_TEST_ROUTER_KEY"))
    assert done.failures["router"] == "workers: HTTP 401 from /workers: the router refused the API key in PDTUI_TEST_ROUTER_KEY"


async def test_a_prefill_and_a_decode_of_two_minor_releases_block_the_router_before_it_starts(sandbox):
    p, d, r, boot = (free_port() for _ in range(4))
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot, generation="older"), {"role": "prefill", "port": p}),
        "decode": (worker_argv("decode", d, bootstrap=boot, generation="current"), {"role": "decode", "port": d}),
        "router": (router_argv(r, [(p, boot)], [d], package="sim"), {"role": "router", "port": r}),
    }
    done, rec, _ = await bring_up(sim_deployment(sandbox, services))
    assert not done.ok
    said = "prefill and decode run different SGLang minor releases: prefill 0.4.10, decode 0.5.23"
    assert done.failures == {} and done.blocked == {"router": said}
    assert rec.states("router") == ["blocked"], "never started"
    assert [(f.level, f.check, f.setting) for f in rec.of(PreflightFinding)] == [("error", "running", "SGLang version")]
    assert rec.states("prefill")[-1] == rec.states("decode")[-1] == "ready", "each server serves on its own"
