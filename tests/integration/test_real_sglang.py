"""pdtui against real SGLang 0.5.23 on this machine's CPU, under a real systemd and journald, over real SSH.

Each test boots a container with a network of its own (tests/real_sglang.py),
installs a prefill and a decode of real SGLang serving the tiny GPT-2 and a real
router with ``pdtui units --install``, and runs pdtui as a user does. The KV
really moves: Mooncake over TCP, on the container's loopback. Every test of this
module runs on one worker: two real servers take ~9 GB and both cores to start.
"""

from __future__ import annotations

import socket

import pytest

from pdtui.config import Deployment
from pdtui.engine.events import Done, PhaseStarted
from pdtui.engine.intent import Intent
from pdtui.sim.systemd_host import SystemdHost
from tests.engine_helpers import Recorder, bring_up
from tests.real_sglang import UNITS, sglang_deployment
from tests.systemd_host import install

pytestmark = pytest.mark.xdist_group("real_sglang")


def active(host: SystemdHost, unit: str) -> str:
    return host.run("systemctl", "show", "-p", "ActiveState", "--value", unit).stdout.strip()


async def test_up_brings_real_sglang_ready_then_starts_and_proves_each_real_router(
        sglang_host, tmp_path, tiny_model, real_router):
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model, router=real_router)
    with sglang_host.network():
        await install(deployment)
        done, rec, _ = await bring_up(deployment)
    assert done.ok, done
    assert [active(sglang_host, unit) for unit in UNITS.values()] == ["active"] * 3
    starting = rec.index("router", "starting")
    assert rec.index("prefill", "ready") < starting and rec.index("decode", "ready") < starting
    for server in ("prefill", "decode"):
        phases = [e.phase for e in rec.of(PhaseStarted) if e.service == server]
        assert phases == ["distributed", "weights", "kv_cache", "http", "warmup", "ready"], (server, phases)
    smoke = [e for e in rec.events if getattr(e, "check", None) == "smoke"]
    assert smoke[-1].ok and "tokens" in smoke[-1].detail, smoke


# -- real failures, real wording: each named, the router never started ----------------------------------------


async def up(host: SystemdHost, deployment: Deployment, **options) -> tuple[Done, Recorder]:
    """``pdtui units --install`` then a bring-up, from inside the container's network."""
    with host.network():
        await install(deployment)
        done, rec, _ = await bring_up(deployment, **options)
    return done, rec


def failed_before_the_router(host: SystemdHost, done: Done, rec: Recorder, service: str) -> str:
    """``service`` failed, the bring-up failed, the router was never started; what pdtui said of ``service``."""
    assert done.exit_code == 1, done
    assert rec.states(service)[-1] == "failed", (rec.states(service), done)
    assert rec.states("router") == ["blocked"], done
    assert host.run("systemctl", "show", "-p", "InvocationID", "--value", UNITS["router"]).stdout.strip() == ""
    return done.failures[service]


@pytest.mark.parametrize("port", ["port", "bootstrap_port"])
async def test_a_port_taken_fails_the_prefill_naming_it(sglang_host, tmp_path, tiny_model, port):
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model)
    taken = getattr(deployment.services["prefill"], port)
    with sglang_host.network(), socket.create_server(("127.0.0.1", taken)):
        done, rec = await up(sglang_host, deployment)
    said = failed_before_the_router(sglang_host, done, rec, "prefill")
    assert f"('127.0.0.1', {taken}): address already in use" in rec.change("prefill", "failed").line, said
    assert said.startswith("HTTP port already in use" if port == "port" else "bootstrap server"), said


async def test_a_model_path_that_does_not_exist_is_named(sglang_host, tmp_path):
    missing = tmp_path / "no-such-model"
    done, rec = await up(sglang_host, sglang_deployment(sglang_host, tmp_path, missing))
    said = failed_before_the_router(sglang_host, done, rec, "prefill")
    assert said.startswith("model not found: no such folder"), said
    assert f"'{missing}'" in rec.change("prefill", "failed").line


async def test_fake_on_a_prefill_is_refused_before_it_starts_and_forced_sglang_refuses_it_too(
        sglang_host, tmp_path, tiny_model):
    deployment = sglang_deployment(sglang_host, tmp_path, tiny_model, transfer_backend={"prefill": "fake", "decode": "fake"})
    done, rec = await up(sglang_host, deployment)
    said = failed_before_the_router(sglang_host, done, rec, "prefill")
    assert "--disaggregation-transfer-backend fake" in said and "SGLang refuses it on a prefill" in said, said
    assert sglang_host.run("systemctl", "show", "-p", "InvocationID", "--value", UNITS["prefill"]).stdout.strip() == ""
    done, rec = await up(sglang_host, deployment, intent=Intent(force=True))
    said = failed_before_the_router(sglang_host, done, rec, "prefill")
    assert said.startswith("SGLang's prefill refuses the fake transfer backend"), said
