"""Faults of the SSH link during a bring-up, over real sshd on 127.0.0.1 with the sim behind it.

The connection goes through a relay the test can cut (a dropped link) or keep
closed (sshd not up yet). What must hold: services keep their state, the
journal lines reach the engine exactly once and in order, HostStatus tells
"reconnecting" then "connected", and an sshd that never comes is one clear
error once the deadline has passed.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess

from pdtui.engine.events import Done, HostStatus, LogLines, Notice, StateChanged
from pdtui.engine.orchestrator import Orchestrator
from pdtui.faces.headless import LinePrinter
from pdtui.hosts import make_host
from pdtui.hosts.http import own_echo
from pdtui.sim.command_lines import SIM_ROUTER
from pdtui.sim.ports import free_port
from pdtui.sim.sandbox import Sandbox
from pdtui.targets.registry import Registry
from tests.engine_helpers import FAST, Recorder, bring_up, router_argv, sim_deployment, worker_argv
from tests.sshd import trust


def deployment_over(sandbox: Sandbox, port: int, *, startup: float = 0.4, timeout: str = "30s",
                    address: str = "127.0.0.1"):
    """The reference deployment on one SSH host at ``address``:``port``, behind pdtui's stand-in router: what these
    tests prove is the link's, whichever router the services put behind it (tests/integration/test_ssh_bringup.py
    brings each real router up over SSH)."""
    p, d, r, boot = (free_port() for _ in range(4))
    host = {"address": address, "port": port, "sysfs": str(sandbox.sysfs),
            "commands": {"systemctl": str(sandbox.bin_dir / "systemctl"),
                         "journalctl": str(sandbox.bin_dir / "journalctl")}}
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot, startup=startup),
                    {"host": "gpu0", "role": "prefill", "port": p, "timeout": timeout}),
        "decode": (worker_argv("decode", d, bootstrap=boot, startup=startup),
                   {"host": "gpu0", "role": "decode", "port": d, "timeout": timeout}),
        "router": (router_argv(r, [(p, boot)], [d], package=SIM_ROUTER),
                   {"host": "gpu0", "role": "router", "port": r, "timeout": timeout}),
    }
    return sim_deployment(sandbox, services, hosts={"gpu0": host})


def journal_cursors(sandbox: Sandbox, unit: str) -> list[str]:
    """Cursors of every journal entry about ``unit``, in journal order, but the server's access lines of pdtui's
    own polling, which are folded out (what a tail must deliver)."""
    out = subprocess.run([*sandbox.commands["journalctl"], "--output=json", "--all", "--no-pager", "--quiet",
                          f"--unit={unit}"], capture_output=True, check=True, timeout=30).stdout
    entries = [json.loads(line) for line in out.splitlines()]
    return [e["__CURSOR"] for e in entries if not (isinstance(e.get("MESSAGE"), str) and own_echo(e["MESSAGE"]))]


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


def printed_about_hosts(rec: Recorder) -> list[str]:
    """What the headless printer prints of these events about hosts (their status, notices), without the times."""
    out = io.StringIO()
    printer = LinePrinter(out)
    for event in rec.events:
        printer(event)
    lines = [re.sub(r"^\[ *[\d.]+s\] ", "", line) for line in out.getvalue().splitlines()]
    return [line for line in lines if line.startswith(("host ", "info: ", "warning: ", "error: "))]


async def test_drop_while_waiting_reconnects_and_the_bring_up_goes_on(sandbox, sshd, ssh_home, forwarder):
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    deployment = deployment_over(sandbox, relay.port, startup=2.5)
    rec = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=FAST)
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
    orchestrator = Orchestrator(deployment_over(sandbox, relay.port), Registry(make_host), timing=FAST)
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
        await asyncio.sleep(FAST.unit_watch * 2)   # the watch has looked at the units again
    finally:
        await orchestrator.close()
    assert len(rec.of(StateChanged)) == changes, rec.of(StateChanged)[changes:]
    assert len(rec.of(Done)) == 1
    assert "reconnecting" in statuses(rec)
    for service in ("prefill", "decode"):
        assert_each_line_once(rec, sandbox, service, f"t-{service}.service")


async def test_sshd_not_up_at_start_is_tried_again_until_it_answers(sandbox, sshd, ssh_home, forwarder,
                                                                    connect_attempts):
    relay = await forwarder(sshd.port)
    relay.blocked = True                     # the port answers, sshd does not (yet)
    trust(ssh_home, sshd, relay.port)
    rec = Recorder()
    orchestrator = Orchestrator(deployment_over(sandbox, relay.port), Registry(make_host), timing=FAST)
    orchestrator.subscribe(rec)
    try:
        run = asyncio.create_task(orchestrator.run())
        await until(lambda: len(connect_attempts) >= 3)
        relay.blocked = False
        done = await asyncio.wait_for(run, 60)
    finally:
        await orchestrator.close()
    assert done.ok, done
    told = printed_about_hosts(rec)
    assert told[0] == f"host gpu0: connecting: 127.0.0.1:{relay.port}"
    assert re.fullmatch(rf"host gpu0: unreachable: gpu0: .*127\.0\.0\.1:{relay.port}.*; trying again for up to \d+s",
                        told[1]), told[1]
    assert told[2:] == [f"host gpu0: connected: 127.0.0.1:{relay.port}", "host gpu0: closed"]


async def test_refused_port_is_told_once_and_tried_until_the_deadline_then_fails_every_service(
        sandbox, ssh_home, connect_attempts):
    port = free_port()                       # nothing listens there
    done, rec, _ = await bring_up(deployment_over(sandbox, port, timeout="2s"))
    refused = f"gpu0: 127.0.0.1:{port} refused the connection (is sshd running there, is the port right?)"
    assert (done.ok, done.exit_code) == (False, 1)
    assert len(connect_attempts) >= 2, "it was tried more than once"
    for service in ("prefill", "decode", "router"):
        assert rec.states(service) == ["failed"]
    assert set(done.failures.values()) == {refused}
    assert rec.of(Notice) == []
    told = printed_about_hosts(rec)
    assert told[0] == f"host gpu0: connecting: 127.0.0.1:{port}"
    assert re.fullmatch(rf"host gpu0: unreachable: {re.escape(refused)}; trying again for up to \ds", told[1]), told[1]
    assert told[2:] == ["host gpu0: closed"]


async def test_unresolvable_host_name_fails_the_bring_up_at_once_in_one_line(sandbox, ssh_home, connect_attempts):
    done, rec, _ = await bring_up(deployment_over(sandbox, 22, address="nohost.invalid", timeout="60s"))
    reason = "gpu0: cannot resolve host name 'nohost.invalid' (check address: in the config)"
    assert (done.ok, done.exit_code) == (False, 1)
    assert done.failures == {"prefill": reason, "decode": reason, "router": reason}
    assert connect_attempts == ["nohost.invalid"]
    assert rec.of(Notice) == []
    assert printed_about_hosts(rec) == ["host gpu0: connecting: nohost.invalid:22", f"host gpu0: error: {reason}",
                                        "host gpu0: closed"]
