"""pdtui against real vLLM 0.32.0 on this machine's CPU, under a real systemd and journald, over real SSH.

Each test boots a container with a network of its own (tests/real_vllm.py),
installs a prefill and a decode of real vLLM serving the tiny Llama and the real
vllm-router with ``pdtui units --install``, and runs pdtui as a user does. The KV
really moves: NIXL over UCX, the decode pulling it on the container's loopback.
``pdtui demo --engine vllm --real`` runs the same servers in a network namespace
of its own.
Every test of this module runs on the worker of the real-SGLang tests, one at a
time: two real servers take ~7 GB and both cores to start.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pdtui.commands import units_command as units
from pdtui.config import Deployment
from pdtui.engine.events import Done, Notice, PhaseStarted, PreflightFinding, ProbeResult
from pdtui.engine.intent import Intent
from pdtui.hosts import make_host
from pdtui.servers.ports import side_channel_port
from pdtui.servers.prometheus import summed
from pdtui.servers.vllm.signatures import SIDE_CHANNEL_TAKEN
from pdtui.sim import real_vllm
from pdtui.sim.systemd_host import SystemdHost
from tests.conftest_sim import fetch
from tests.engine_helpers import Recorder, bring_up, until_it_fails
from tests.real_sglang import ONE_ENGINE_AT_A_TIME, before_start_deployment
from tests.real_vllm import VLLM_UNITS, vllm_deployment
from tests.systemd_host import install

pytestmark = ONE_ENGINE_AT_A_TIME


def active(host: SystemdHost, unit: str) -> str:
    return host.run("systemctl", "show", "-p", "ActiveState", "--value", unit).stdout.strip()


async def up(host: SystemdHost, deployment: Deployment, **options) -> tuple[Done, Recorder]:
    """``pdtui units --install`` then a bring-up, from inside the container's network."""
    with host.network():
        await install(deployment)
        done, rec, _ = await bring_up(deployment, **options)
    return done, rec


async def test_up_brings_real_vllm_ready_and_proven_then_a_prefill_killed_mid_request_is_named_on_both_servers(
        vllm_host, tmp_path, vllm_model):
    """Proven, then a request caught between its two legs: the prefill has computed its KV, the decode's worker is
    held (SIGSTOP) before it pulls it, and the prefill is killed (SIGKILL, as the OOM killer does). The decode,
    let go, finds its KV's source gone: the request fails, and pdtui names both ends."""
    deployment = vllm_deployment(vllm_host, tmp_path, vllm_model)
    prefill, router = deployment.services["prefill"], deployment.services["router"]
    answered: list[str] = []

    def proven_then_the_prefill_killed_mid_request(done: Done) -> None:
        assert done.ok, done
        assert [active(vllm_host, unit) for unit in VLLM_UNITS.values()] == ["active"] * 3
        [decode_worker] = pids(vllm_host, "VLLM::Worker", VLLM_UNITS["decode"])
        before = served(prefill.port)
        assert vllm_host.run("kill", "-STOP", decode_worker).returncode == 0
        with ThreadPoolExecutor(1) as pool:     # its thread is made inside the container's network
            request = pool.submit(complete, router.port, str(vllm_model))
            deadline = time.monotonic() + 120
            while served(prefill.port) == before and not request.done() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert served(prefill.port) > before, "the prefill leg never finished"
            assert vllm_host.run("systemctl", "kill", "-s", "SIGKILL", VLLM_UNITS["prefill"]).returncode == 0
            assert vllm_host.run("kill", "-CONT", decode_worker).returncode == 0
            answered.append(request.result(timeout=120))

    def transfer_told(rec: Recorder) -> bool:
        return any("KV transfer error" in n.text for n in rec.of(Notice) if n.service == "decode")

    with vllm_host.network():
        await install(deployment)
        rec = await until_it_fails(deployment, "prefill", timeout=150, told=transfer_told,
                                   meanwhile=proven_then_the_prefill_killed_mid_request)
    starting = rec.index("router", "starting")
    assert rec.index("prefill", "ready") < starting and rec.index("decode", "ready") < starting
    for server in ("prefill", "decode"):
        phases = [e.phase for e in rec.of(PhaseStarted) if e.service == server]
        assert phases == ["engine", "distributed", "weights", "kv_cache", "http", "ready"], (server, phases)
    checks = {p.check: p for p in rec.of(ProbeResult) if p.service == "router" and p.ok}
    assert re.match(r"\d+ tokens in \d+ ms for a [\d,]+-token prompt", checks["smoke"].detail), checks["smoke"]
    assert checks["kv"].detail.startswith("KV moved prefill→decode, "), checks["kv"]
    assert checks["workers"].detail == "2 of 2 backends healthy", checks["workers"]
    assert answered == ["HTTP 500"], answered
    failed = rec.change("prefill", "failed")
    assert "ended (killed by signal 9/KILL)" in failed.reason, failed
    [told] = [n for n in rec.of(Notice) if n.service == "decode" and "KV transfer error" in n.text]
    assert "KV load failure" in told.text or "NIXL" in told.text, told
    assert "failed" not in rec.states("decode"), "the decode serves on"


def pids(host: SystemdHost, process: str, unit: str) -> list[str]:
    """The processes named ``process`` in ``unit``'s cgroup."""
    return host.run("sh", "-c", f"for p in $(pgrep -f {process}); do grep -qs {unit} /proc/$p/cgroup && echo $p; "
                                "done").stdout.split()


def served(port: int) -> float:
    """How many requests the vLLM server at ``port`` has finished."""
    _, text = fetch(f"http://127.0.0.1:{port}/metrics")
    return summed(text.decode(), ("vllm:request_success",), {"vllm:request_success_total": "done"}).get("done", 0.0)


def complete(port: int, model: str) -> str:
    """A completion through the router at ``port``: its text, or the HTTP status it failed with."""
    body = {"model": model, "prompt": "The router sends", "max_tokens": 8}
    status, answer = fetch(f"http://127.0.0.1:{port}/v1/completions", "POST", body, timeout=180)
    return json.loads(answer)["choices"][0]["text"] if status == 200 else f"HTTP {status}"


def test_demo_real_brings_real_vllm_up_behind_vllm_router_in_a_network_of_its_own():
    reason = real_vllm.missing_reason()
    if reason:
        pytest.skip(f"no real vLLM: {reason}")
    result = subprocess.run([sys.executable, "-m", "pdtui", "demo", "--engine", "vllm", "--real", "--headless",
                             "--no-load"], capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL,
                            env={k: v for k, v in os.environ.items() if k != "PDTUI_CONFIG"})
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.index("prefill  READY") < out.index("router   starting") and "all ready" in out, out
    assert re.search(r"smoke: ok: \d+ tokens in \d+ ms for a [\d,]+-token prompt", out), out
    assert "kv: ok: KV moved prefill→decode" in out, out
    assert "stopped the demo deployment and removed its sandbox" in result.stderr


# -- real failures, real wording: each named, the router never started ----------------------------------------


async def test_a_side_channel_port_taken_and_an_engine_core_that_cannot_start_are_each_named_in_vllm_words(
        vllm_host, tmp_path, vllm_model):
    """The prefill's side-channel port is taken (vLLM hangs rather than exits); the decode asks for more KV cache
    than the node has (its engine core fails to start, the root cause logged above)."""
    deployment = vllm_deployment(vllm_host, tmp_path, vllm_model, env={"decode": {"VLLM_CPU_KVCACHE_SPACE": "200"}})
    taken = side_channel_port(deployment, deployment.services["prefill"])
    with vllm_host.network(), socket.create_server(("127.0.0.1", taken)):
        await install(deployment)
        rec = await until_it_fails(deployment, ["prefill", "decode"], timeout=300)
    done = rec.of(Done)[-1]
    assert rec.states("router") == ["blocked"], done
    assert vllm_host.run("systemctl", "show", "-p", "InvocationID", "--value", VLLM_UNITS["router"]).stdout.strip() == ""
    prefill, decode = rec.change("prefill", "failed"), rec.change("decode", "failed")
    assert prefill.reason.startswith(SIDE_CHANNEL_TAKEN), prefill
    assert "ZMQError: Address already in use" in (prefill.line or ""), prefill
    assert VLLM_UNITS["prefill"] in done.left_running, done     # it hangs: pdtui leaves it for the user to see
    assert decode.reason.startswith("the NUMA node has less free memory than the KV cache asks for"), decode
    assert "less than requested memory for kv (200.0 GiB)" in (decode.line or ""), decode


async def test_a_dtype_mismatch_is_refused_before_start_and_forced_the_first_request_names_the_hash_mismatch(
        vllm_host, tmp_path, vllm_model):
    deployment = vllm_deployment(vllm_host, tmp_path, vllm_model, decode=["--dtype", "bfloat16"])
    done, rec = await up(vllm_host, deployment)
    assert done.exit_code == 1 and "disagree on --dtype: prefill runs float32, decode bfloat16" in str(done.failures)
    assert [active(vllm_host, unit) for unit in VLLM_UNITS.values()] == ["inactive"] * 3
    done, rec = await up(vllm_host, deployment, intent=Intent(force=True))
    assert done.exit_code == 1, done
    said = str(done.failures) + str([p.detail for p in rec.of(ProbeResult) if not p.ok])
    journal = vllm_host.run("journalctl", "-o", "short-precise", "-u", VLLM_UNITS["decode"]).stdout
    assert "NIXL compatibility hash mismatch" in said, (said, [line for line in journal.splitlines() if "NIXL" in line])


async def test_a_flag_of_another_release_and_a_misspelt_variable_are_told_before_start_by_vllms_own_parser(
        sandbox, tmp_path, monkeypatch):
    """--disable-log-requests (an earlier release's) on the decode is refused by what vLLM 0.32's parser says,
    before any unit starts, naming its line; VLLM_CPU_KVCACHE_SPAC, a variable vLLM does not list, is warned of.
    No server runs."""
    reason = real_vllm.missing_reason()
    if reason:
        pytest.skip(f"no real vLLM: {reason}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tmp_path / "no-model"
    decode = real_vllm.launch("decode", model)
    deployment = before_start_deployment(sandbox, tmp_path, {
        "prefill": {**real_vllm.launch("prefill", model), "env": {"VLLM_CPU_KVCACHE_SPAC": "1"}},
        "decode": {**decode, "args": [*decode["args"], "--disable-log-requests"]}}, engine="vllm")
    assert await units.install(deployment, make_host, yes=False) == 0
    done, rec, _ = await bring_up(deployment)
    assert done.exit_code == 1 and set(done.failures) == {"decode"}, done
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/pdtui\.yaml:\d+:\d+: vllm 0\.32\.0 has no "
                        r"--disable-log-requests \(did you mean '--enable-log-requests'\?\)",
                        done.failures["decode"]), done
    warned = [f for f in rec.of(PreflightFinding) if f.level == "warning"]
    assert [(f.service, f.setting) for f in warned] == [("prefill", "VLLM_CPU_KVCACHE_SPAC")], warned
    assert "(did you mean 'VLLM_CPU_KVCACHE_SPACE'?)" in warned[0].text
    assert sandbox.store.started_names() == []
