"""Faults of the SSH link during a bring-up, over real sshd on 127.0.0.1 with the sim behind it.

The connection goes through a relay the test can cut (a dropped link) or keep
closed (sshd not up yet). What must hold: services keep their state, the
journal lines reach the engine exactly once and in order, HostStatus tells
"reconnecting" then "connected", and an sshd that never comes is one clear
error once the deadline has passed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from pdtui.engine.events import Done, HostStatus, LogLines, Notice, StateChanged
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.sim.ports import free_port
from pdtui.sim.sandbox import Sandbox
from tests.engine_helpers import FAST, Recorder, bring_up, router_argv, sim_deployment, worker_argv
from tests.sshd import forwarder, ssh_home, sshd, sshd_factory, trust  # noqa: F401  (fixtures)

pytest.importorskip("sglang_router")


@pytest.fixture
def sandbox(tmp_path):
    with Sandbox.create(tmp_path / "sim") as sb:
        yield sb


def deployment_over(sandbox: Sandbox, port: int, *, startup: float = 0.4, timeout: str = "30s"):
    """The reference deployment on one SSH host at 127.0.0.1:``port``."""
    p, d, r, boot = (free_port() for _ in range(4))
    host = {"address": "127.0.0.1", "port": port,
            "commands": {"systemctl": str(sandbox.bin_dir / "systemctl"),
                         "journalctl": str(sandbox.bin_dir / "journalctl")}}
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot, startup=startup),
                    {"host": "gpu0", "role": "prefill", "port": p, "timeout": timeout}),
        "decode": (worker_argv("decode", d, bootstrap=boot, startup=startup),
                   {"host": "gpu0", "role": "decode", "port": d, "timeout": timeout}),
        "router": (router_argv(r, [(p, boot)], [d]), {"host": "gpu0", "role": "router", "port": r, "timeout": timeout}),
    }
    return sim_deployment(sandbox, services, hosts={"gpu0": host})


def journal_cursors(sandbox: Sandbox, unit: str) -> list[str]:
    """Cursors of every journal entry about ``unit``, in journal order (what a tail must deliver)."""
    out = subprocess.run([*sandbox.commands["journalctl"], "--output=json", "--all", "--no-pager", "--quiet",
                          f"--unit={unit}"], capture_output=True, check=True, timeout=30).stdout
    return [json.loads(line)["__CURSOR"] for line in out.splitlines()]


def assert_each_line_once(rec: Recorder, sandbox: Sandbox, service: str, unit: str) -> None:
    delivered = [r.cursor for e in rec.of(LogLines) if e.service == service for r in e.lines]
    assert delivered, service
    assert len(delivered) == len(set(delivered)), f"{service}: a line was delivered twice"
    # Every entry up to the newest one delivered was delivered. (Not in strict journal order: a start's
    # own history is judged first, then systemd's lines about it that the tail held meanwhile.)
    journal = journal_cursors(sandbox, unit)
    position = {cursor: n for n, cursor in enumerate(journal)}
    assert all(c in position for c in delivered), f"{service}: a line not in the journal"
    newest = max(map(position.__getitem__, delivered))
    assert sorted(delivered, key=position.__getitem__) == journal[:newest + 1], f"{service}: a line was lost"


async def until(condition, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


def statuses(rec: Recorder) -> list[str]:
    return [e.status for e in rec.of(HostStatus)]


async def test_drop_while_waiting_reconnects_and_the_bring_up_goes_on(sandbox, sshd, ssh_home, forwarder):
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    deployment = deployment_over(sandbox, relay.port, startup=2.5)
    rec = Recorder()
    orchestrator = Orchestrator(deployment, make_host, timing=FAST)
    orchestrator.subscribe(rec)
    try:
        run = asyncio.create_task(orchestrator.run())
        await until(lambda: rec.states("prefill")[-1:] == rec.states("decode")[-1:] == ["waiting"])
        relay.cut()
        done = await asyncio.wait_for(run, 60)
    finally:
        await orchestrator.close()
    assert done.ok, done
    for service in ("prefill", "decode", "router"):
        assert rec.states(service) == ["starting", "waiting", "ready"]
    assert "reconnecting" in statuses(rec) and statuses(rec).count("connected") >= 2
    assert relay.accepted >= 2
    for service in ("prefill", "decode"):
        assert_each_line_once(rec, sandbox, service, f"t-{service}.service")


async def test_drop_in_steady_state_keeps_every_state_and_every_line_once(sandbox, sshd, ssh_home, forwarder):
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    rec = Recorder()
    orchestrator = Orchestrator(deployment_over(sandbox, relay.port), make_host, timing=FAST)
    orchestrator.subscribe(rec)
    try:
        done = await orchestrator.run()
        assert done.ok, done
        changes = len(rec.of(StateChanged))
        connected = statuses(rec).count("connected")
        relay.cut()
        await until(lambda: statuses(rec).count("connected") > connected)
        # Lines written after the reconnect arrive too (the workers log steadily).
        lines_now = sum(len(e.lines) for e in rec.of(LogLines))
        await until(lambda: sum(len(e.lines) for e in rec.of(LogLines)) > lines_now + 2)
        await asyncio.sleep(FAST.unit_poll * 2)   # the watch has looked at the units again
    finally:
        await orchestrator.close()
    assert len(rec.of(StateChanged)) == changes, rec.of(StateChanged)[changes:]
    assert len(rec.of(Done)) == 1
    assert "reconnecting" in statuses(rec)
    for service in ("prefill", "decode"):
        assert_each_line_once(rec, sandbox, service, f"t-{service}.service")


async def test_sshd_not_up_at_start_is_tried_again_until_it_answers(sandbox, sshd, ssh_home, forwarder):
    relay = await forwarder(sshd.port)
    relay.blocked = True                     # the port answers, sshd does not (yet)
    trust(ssh_home, sshd, relay.port)
    rec = Recorder()
    orchestrator = Orchestrator(deployment_over(sandbox, relay.port), make_host, timing=FAST)
    orchestrator.subscribe(rec)
    try:
        run = asyncio.create_task(orchestrator.run())
        await until(lambda: statuses(rec).count("error") >= 2)
        relay.blocked = False
        done = await asyncio.wait_for(run, 60)
    finally:
        await orchestrator.close()
    assert done.ok, done
    retrying = [n for n in rec.of(Notice) if "trying again" in n.text]
    assert len(retrying) == 1 and "gpu0" in retrying[0].text


async def test_sshd_that_never_comes_fails_every_service_in_one_line_after_the_deadline(sandbox, ssh_home):
    port = free_port()                       # nothing listens there
    done, rec, _ = await bring_up(deployment_over(sandbox, port, timeout="2s"))
    assert not done.ok
    assert statuses(rec).count("error") >= 2, "it was tried more than once"
    for service in ("prefill", "decode", "router"):
        assert rec.states(service) == ["failed"]
    reasons = set(done.failures.values())
    assert reasons == {f"gpu0: 127.0.0.1:{port} refused the connection (is sshd running there, is the port right?)"}
