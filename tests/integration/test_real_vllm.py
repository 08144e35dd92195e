"""pdtui against real vLLM 0.32.0 on this machine's CPU, under a real systemd and journald, over real SSH.

Each test boots a container with a network of its own (tests/real_vllm.py),
installs a prefill and a decode of real vLLM serving the tiny Llama and the real
vllm-router with ``pdtui units --install``, and runs pdtui as a user does. The KV
really moves: NIXL over UCX, the decode pulling it on the container's loopback.
``pdtui demo --engine vllm --real`` runs the same servers in a network namespace
of its own.
Every test of this module runs on one worker: two real servers take ~7 GB and
both cores to start.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from pdtui.config import Deployment
from pdtui.engine.events import Done, PhaseStarted, ProbeResult
from pdtui.engine.intent import Intent
from pdtui.servers.ports import side_channel_port
from pdtui.servers.vllm.signatures import SIDE_CHANNEL_TAKEN
from pdtui.sim import real_vllm
from pdtui.sim.systemd_host import SystemdHost
from tests.engine_helpers import Recorder, bring_up, until_it_fails
from tests.real_vllm import VLLM_UNITS, vllm_deployment
from tests.systemd_host import install

pytestmark = pytest.mark.xdist_group("real_vllm")


def active(host: SystemdHost, unit: str) -> str:
    return host.run("systemctl", "show", "-p", "ActiveState", "--value", unit).stdout.strip()


async def up(host: SystemdHost, deployment: Deployment, **options) -> tuple[Done, Recorder]:
    """``pdtui units --install`` then a bring-up, from inside the container's network."""
    with host.network():
        await install(deployment)
        done, rec, _ = await bring_up(deployment, **options)
    return done, rec


async def test_up_brings_real_vllm_ready_and_proven_then_a_prefill_whose_worker_is_killed_fails_naming_it(
        vllm_host, tmp_path, vllm_model):
    deployment = vllm_deployment(vllm_host, tmp_path, vllm_model)

    def proven_then_its_worker_killed(done: Done) -> None:
        assert done.ok, done
        assert [active(vllm_host, unit) for unit in VLLM_UNITS.values()] == ["active"] * 3
        [worker] = vllm_host.run("sh", "-c", "for p in $(pgrep -f VLLM::Worker); do grep -qs v-prefill.service "
                                             "/proc/$p/cgroup && echo $p; done").stdout.split()
        assert vllm_host.run("kill", "-9", worker).returncode == 0

    with vllm_host.network():
        await install(deployment)
        rec = await until_it_fails(deployment, "prefill", timeout=150, meanwhile=proven_then_its_worker_killed)
    starting = rec.index("router", "starting")
    assert rec.index("prefill", "ready") < starting and rec.index("decode", "ready") < starting
    for server in ("prefill", "decode"):
        phases = [e.phase for e in rec.of(PhaseStarted) if e.service == server]
        assert phases == ["engine", "distributed", "weights", "kv_cache", "http", "ready"], (server, phases)
    checks = {p.check: p for p in rec.of(ProbeResult) if p.service == "router" and p.ok}
    assert re.match(r"\d+ tokens in \d+ ms for a [\d,]+-token prompt", checks["smoke"].detail), checks["smoke"]
    assert checks["kv"].detail.startswith("KV moved prefill→decode, "), checks["kv"]
    assert checks["workers"].detail == "2 of 2 backends healthy", checks["workers"]
    failed = rec.change("prefill", "failed")
    assert failed.reason.startswith("after ready: a worker process died"), failed
    assert re.search(r"Worker proc \S+ died unexpectedly", failed.line or ""), failed


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
    deployment = vllm_deployment(vllm_host, tmp_path, vllm_model, decode=["--dtype", "float32"])
    done, rec = await up(vllm_host, deployment)
    assert done.exit_code == 1 and "disagree on --dtype: prefill runs bfloat16, decode float32" in str(done.failures)
    assert [active(vllm_host, unit) for unit in VLLM_UNITS.values()] == ["inactive"] * 3
    done, rec = await up(vllm_host, deployment, intent=Intent(force=True))
    assert done.exit_code == 1, done
    said = str(done.failures) + str([p.detail for p in rec.of(ProbeResult) if not p.ok])
    journal = vllm_host.run("journalctl", "-o", "short-precise", "-u", VLLM_UNITS["decode"]).stdout
    assert "NIXL compatibility hash mismatch" in said, (said, [line for line in journal.splitlines() if "NIXL" in line])
