"""pdtui against real SGLang 0.5.23 on this machine's CPU, under a real systemd and journald, over real SSH.

Each test boots a container with a network of its own (tests/real_sglang.py),
installs a prefill and a decode of real SGLang serving the tiny GPT-2 and a real
router with ``pdtui units --install``, and runs pdtui as a user does. The KV
really moves: Mooncake over TCP, on the container's loopback. Every test of this
module runs on the worker of the real-vLLM tests, one at a time: two real servers
take ~9 GB and both cores to start.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pdtui.commands import units_command as units
from pdtui.config import Deployment
from pdtui.engine.events import Done, Notice, PhaseStarted, StateChanged
from pdtui.engine.intent import Intent
from pdtui.hosts import make_host
from pdtui.sim import real_sglang, systemd_host
from pdtui.sim.systemd_host import SystemdHost
from tests.engine_helpers import Recorder, bring_up, until_it_fails, until_told
from tests.real_sglang import ONE_ENGINE_AT_A_TIME, UNITS, Served, active, before_start_deployment, pdtui, sglang_deployment
from tests.systemd_host import install

pytestmark = ONE_ENGINE_AT_A_TIME


def test_up_brings_real_sglang_ready_then_starts_and_proves_the_real_sglang_router(served_sglang: Served):
    """sglang-router here (the bring-up the tests that look at or operate one share); smg, the other real router,
    in front of ``demo --real`` below."""
    done, rec = served_sglang.done, served_sglang.rec
    assert done.ok, done
    assert served_sglang.active == ["active"] * 4
    starting = rec.index("router", "starting")
    assert rec.index("prefill", "ready") < starting and rec.index("decode", "ready") < starting
    for server in ("prefill", "decode"):
        phases = [e.phase for e in rec.of(PhaseStarted) if e.service == server]
        assert phases == ["distributed", "weights", "kv_cache", "http", "warmup", "ready"], (server, phases)
    smoke = [e for e in rec.events if getattr(e, "check", None) == "smoke"]
    assert smoke[-1].ok and "tokens" in smoke[-1].detail, smoke


def test_status_then_a_decode_restarted_under_load_drained_loses_no_request_then_down(served_sglang: Served):
    """Two decodes, so the router serves on while one is out: a user's load through the router sees no failure."""
    operated = served_sglang.operated
    assert operated is not None, served_sglang.done
    status, restart, down = operated.status, operated.restart, operated.down
    assert status.returncode == 0, status.stdout + status.stderr
    assert {s["name"]: s["state"] for s in json.loads(status.stdout)["services"]} == dict.fromkeys(
        ["prefill", "decode", "decode-1", "router"], "ready")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    out = restart.stdout
    assert out.index("info: decode: taking it out of router") < out.index("info: decode: back in router"), out
    answered = re.search(r"stopped: (\d+) answered, (\d+) failed", operated.load)
    assert answered and int(answered[1]) > 10 and answered[2] == "0", operated.load
    assert down.returncode == 0, down.stdout + down.stderr
    assert "the unit ended failed" not in down.stdout, down.stdout
    assert operated.after_down == ["inactive"] * 4


def test_demo_real_brings_real_sglang_up_behind_the_router_in_a_network_of_its_own():
    reason = real_sglang.missing_reason()
    if reason:
        pytest.skip(f"no real SGLang: {reason}")
    result = pdtui("demo", "--real", "--headless", "--no-load")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.index("prefill  READY") < out.index("router   starting") and "all ready" in out, out
    assert re.search(r"smoke: ok: \d+ tokens in \d+ ms for a [\d,]+-token prompt", out), out
    assert "kv: ok: KV moved prefill→decode" in out, out
    assert "stopped the demo deployment and removed its sandbox" in result.stderr


# -- real failures, real wording: each named, the router never started ----------------------------------------


async def up(host: SystemdHost, deployment: Deployment, **options) -> tuple[Done, Recorder]:
    """``pdtui units --install`` then a bring-up, from inside the container's network."""
    with host.network():
        await install(deployment)
        done, rec, _ = await bring_up(deployment, **options)
    return done, rec


def failed_before_the_router(host: SystemdHost, done: Done, rec: Recorder, service: str | None = None) -> str:
    """``service`` failed (None: whichever server failed first, when both run the same bad flags: the first failure
    decides the bring-up, the other may still be waiting), the bring-up failed, the router was never started; what
    pdtui said of it."""
    assert done.exit_code == 1, done
    service = service or next(name for name in ("prefill", "decode") if name in done.failures)
    assert rec.states(service)[-1] == "failed", (rec.states(service), done)
    assert rec.states("router") == ["blocked"], done
    assert host.run("systemctl", "show", "-p", "InvocationID", "--value", UNITS["router"]).stdout.strip() == ""
    return done.failures[service]


@pytest.mark.parametrize("port", ["port", "bootstrap_port"])
async def test_a_port_taken_fails_the_prefill_naming_it(sglang_host, tmp_path, tiny_model, port):
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model, servers=["prefill"])
    taken = getattr(deployment.services["prefill"], port)
    with sglang_host.network(), socket.create_server(("127.0.0.1", taken)):
        done, rec = await up(sglang_host, deployment)
    said = failed_before_the_router(sglang_host, done, rec, "prefill")
    assert f"('127.0.0.1', {taken}): address already in use" in rec.change("prefill", "failed").line, said
    assert said.startswith("HTTP port already in use" if port == "port" else "bootstrap server"), said


async def test_a_model_path_that_does_not_exist_is_named(sglang_host, tmp_path):
    missing = tmp_path / "no-such-model"
    done, rec = await up(sglang_host, sglang_deployment(sglang_host, tmp_path, missing, servers=["prefill"]))
    said = failed_before_the_router(sglang_host, done, rec)
    assert said.startswith("model not found: no such folder"), said
    assert any(f"'{missing}'" in (change.line or "") for change in rec.of(StateChanged) if change.new.value == "failed")


async def test_fake_on_a_prefill_is_refused_before_it_starts_and_forced_sglang_refuses_it_too(
        sglang_host, tmp_path, tiny_model):
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model, transfer_backend={"prefill": "fake"},
                                   servers=["prefill"])
    done, rec = await up(sglang_host, deployment)
    said = failed_before_the_router(sglang_host, done, rec, "prefill")
    assert "--disaggregation-transfer-backend fake" in said and "SGLang refuses it on a prefill" in said, said
    assert sglang_host.run("systemctl", "show", "-p", "InvocationID", "--value", UNITS["prefill"]).stdout.strip() == ""
    done, rec = await up(sglang_host, deployment, intent=Intent(force=True))
    said = failed_before_the_router(sglang_host, done, rec, "prefill")
    assert said.startswith("SGLang's prefill refuses the fake transfer backend"), said


async def test_a_transfer_backend_whose_package_is_missing_is_named(sglang_host, tmp_path, tiny_model):
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model, transfer_backend={"prefill": "nixl"},
                                   servers=["prefill"])
    done, rec = await up(sglang_host, deployment)
    said = failed_before_the_router(sglang_host, done, rec)
    assert said.startswith("KV transfer backend not installed"), said
    assert any("ImportError: Please install NIXL" in (change.line or "") for change in rec.of(StateChanged)
               if change.new.value == "failed")


async def test_a_decode_whose_scheduler_is_killed_after_ready_fails_naming_what_sglang_said(
        sglang_host, tmp_path, tiny_model):
    """0.5.23 watches its processes: it says which one died and how, then kills its whole tree."""
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model)

    def kill_its_scheduler(done: Done) -> None:
        assert done.ok, done
        main = sglang_host.run("systemctl", "show", "-p", "MainPID", "--value", UNITS["decode"]).stdout.strip()
        [scheduler] = sglang_host.run("pgrep", "-P", main, "-f", "sglang::scheduler").stdout.split()
        assert sglang_host.run("kill", "-9", scheduler).returncode == 0

    with sglang_host.network():
        await install(deployment)
        recorder = await until_it_fails(deployment, "decode", timeout=150, meanwhile=kill_its_scheduler)
    failed = recorder.change("decode", "failed")
    assert failed.reason == "after ready: a server process died", failed
    assert re.search(r"Subprocess scheduler_0 \(pid=\d+\) crashed with exit code -9", failed.line or ""), failed


async def test_a_decode_whose_kv_pool_is_smaller_than_the_context_is_told_stuck_in_its_warm_up_quoting_sglangs_warning(
        sglang_host, tmp_path, tiny_model):
    """0.5.23 warns and goes on; its decode then waits for room that never comes in the PD warm-up, silent. pdtui
    tells it stuck there once it was silent for its stall_after, quoting that warning, long before its timeout (which
    quotes it as well: the sim's test plays the timeout). The timeout leaves a loaded machine room to reach the warm-up:
    one whose other workers kept both cores busy took 74 s to reach distributed init."""
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model, decode=["--max-total-tokens", "64"],
                                   timeout="600s", servers=["decode"], keys={"decode": {"stall_after": "20s"}})

    def stuck(rec: Recorder) -> list[str]:
        return [n.text for n in rec.of(Notice) if "in the PD warm-up" in n.text]   # not a slow first line

    with sglang_host.network():
        await install(deployment)
        rec = await until_told(deployment, stuck, timeout=600)
    [stall] = stuck(rec)
    assert re.match(r"decode: no line for 20s in the PD warm-up \(since \d+:\d+\): it may be stuck; not ready after "
                    r"10m it fails; its last warning: .*KV pool holds 64 tokens, fewer than --context-length 8192", stall), stall
    assert "ready" not in rec.states("decode") and "starting" not in rec.states("router"), rec.events


async def test_a_page_size_mismatch_is_refused_before_start_and_forced_the_decode_dies_on_the_smoke(
        sglang_host, tmp_path, tiny_model):
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model, prefill=["--page-size", "16"],
                                   decode=["--page-size", "1"])
    done, rec = await up(sglang_host, deployment)
    assert done.exit_code == 1 and done.failures["decode"].startswith("prefill and decode disagree on --page-size: "
                                                                      "prefill runs 16"), done
    assert [active(sglang_host, unit) for unit in UNITS.values()] == ["inactive"] * 3
    done, rec = await up(sglang_host, deployment, intent=Intent(force=True))
    assert done.exit_code == 1 and rec.states("decode") == ["starting", "waiting", "ready", "failed"], done
    assert done.failures["decode"] == ("after ready: scheduler crashed: RuntimeError: Page size mismatch: prefill "
                                       "server has page_size=16, but decode server has page_size=1. Both servers must "
                                       "use the same --page-size value."), done


async def test_a_decode_the_router_will_not_take_for_its_api_key_is_named_with_why(sglang_host, tmp_path, tiny_model):
    """A decode started with --api-key, a router (smg) not given it: SGLang answers /health without the key, so the
    decode is ready by its own checks, but smg's backend detection asks /v1/models, gets 401, and keeps the decode
    out for minutes, retrying. pdtui asks the decode what smg asks and names the 401, quoting smg's line."""
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model, decode=["--api-key", "the-decodes-own"],
                                   keys={"router": {"timeout": "60s"}})
    done, rec = await up(sglang_host, deployment, smoke=False)
    assert rec.states("decode")[-1] == "ready" and rec.states("router")[-1] == "timed_out", done
    decode = deployment.services["decode"].port
    reason = done.failures["router"]
    assert (f"workers (missing: decode; decode: the router's backend detection (GET /v1/models at "
            f"http://127.0.0.1:{decode}): HTTP 401") in reason, reason
    assert "next: the server wants an API key the router does not send" in reason, reason
    assert re.search(r"the router logged: Step failed step_id=detect_backend .*401 Unauthorized", reason), reason
    assert "the-decodes-own" not in json.dumps(rec.events, default=str), "the key is never shown"


async def test_a_flag_of_another_release_is_refused_before_start_by_the_installed_sglangs_own_parser(
        sandbox, tmp_path, monkeypatch):
    """--disaggregation-decode-tp (an earlier release's) on the prefill: refused by what SGLang 0.5.23's parser
    says, before any unit starts, naming its line; the answer kept for the next bring-up. No server runs."""
    reason = real_sglang.missing_reason()
    if reason:
        pytest.skip(f"no real SGLang: {reason}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tmp_path / "no-model"
    prefill = real_sglang.launch("prefill", model)
    deployment = before_start_deployment(sandbox, tmp_path, {
        "prefill": {**prefill, "args": [*prefill["args"], "--disaggregation-decode-tp", "2"]},
        "decode": real_sglang.launch("decode", model)})
    assert await units.install(deployment, make_host, yes=False) == 0
    done, rec, _ = await bring_up(deployment)
    assert done.exit_code == 1 and set(done.blocked) == {"decode", "router"}, done
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/pdtui\.yaml:\d+:\d+: sglang 0\.5\.23 has no "
                        r"--disaggregation-decode-tp \(did you mean '--disaggregation-mode'\?\)",
                        done.failures["prefill"]), done
    assert sandbox.store.started_names() == []
    [kept] = (tmp_path / "cache" / "pdtui" / "engine-arguments").iterdir()
    assert kept.stat().st_mode & 0o777 == 0o600 and json.loads(kept.read_text())["version"] == "0.5.23"


def test_the_real_sglang_bench_prints_its_figures():
    """bench/real_sglang.py --quick (one round, pdtui then the floor): its keys, never a figure. It brings real SGLang up
    once more (two to three minutes of both cores in the suite), so it runs when asked: PDTUI_REAL_BENCH=1."""
    if not os.environ.get("PDTUI_REAL_BENCH"):
        pytest.skip("the real-SGLang bench runs when asked (PDTUI_REAL_BENCH=1 scripts/test)")
    for reason in (real_sglang.missing_reason(), systemd_host.missing_reason()):
        if reason:
            pytest.skip(reason)
    bench = Path(__file__).resolve().parents[2] / "bench" / "real_sglang.py"
    done = subprocess.run([sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    keys = {"before", "prefill_own", "decode_own", "handover", "reaction", "router", "total", "overhead"}
    assert set(figures["pdtui"]) == set(figures["floor"]) == set(figures["difference"]) == keys, figures
