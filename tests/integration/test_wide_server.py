"""A server over several nodes, brought up on simulated machines: its ranks start, fail and stop as one server."""

from __future__ import annotations

import asyncio

import yaml

from pdtui.config import parse_config
from pdtui.engine.events import LogLines, Notice, PhaseStarted
from pdtui.engine.intent import Intent, RestartHow, Verb
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.targets.registry import Registry
from tests.engine_helpers import FAST, Recorder, bring_up, reference, until_it_fails
from tests.sshd import trust


def rank_unit_active(sandbox, node: str | None) -> str:
    """The decode unit's ActiveState on gpu0 (``node`` None) or on the machine ``node`` beside it."""
    import subprocess
    machine = next(n for n in sandbox.nodes() if n.root.name == node) if node else sandbox
    out = subprocess.run([*machine.commands["systemctl"], "show", "-p", "ActiveState", "sglang-dsv4-decode.service"],
                         capture_output=True, text=True, check=True).stdout
    return out.strip().partition("=")[2]


async def test_a_two_node_decode_comes_up_ready_and_the_router_waits_for_both_ranks(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, nodes=2))
    assert done.ok, done
    assert set(done.time_to_ready) == {"prefill", "decode", "decode@1", "router"}
    assert rec.index("decode@1", "ready") < rec.index("router", "starting")
    dummy = [r.text for e in rec.of(LogLines) if e.service == "decode@1" for r in e.lines
             if "Dummy health check server started" in r.text]
    assert dummy and [e.phase for e in rec.of(PhaseStarted) if e.service == "decode@1"][-1] == "ready"
    router = (sandbox.root / "units" / "sglang-dsv4-router.service").read_text()
    assert router.count("--decode") == 1          # rank 0 alone: the others serve no API
    assert rank_unit_active(sandbox, "gpu1") == "active"


async def test_a_rank_that_fails_fails_its_server_and_its_other_ranks_are_stopped(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, nodes=2, failures={"decode@1": "crash"}))
    assert not done.ok
    assert rec.states("decode@1")[-1] == "failed"
    # Rank 0 is stopped, or (its gloo line judged before rank 1's end) found dead of its peer's end: either way
    # rank 1 is named the cause.
    assert rec.states("decode")[-1] in ("stopped", "failed")
    told = [n.text for n in rec.of(Notice) if n.level == "error" and n.service == "decode"]
    assert any(text.startswith("decode: rank 1 on gpu1 failed") for text in told), told
    assert rec.states("router") == ["blocked"]
    assert rank_unit_active(sandbox, None) != "active" and rank_unit_active(sandbox, "gpu1") != "active"


async def test_a_rank_that_dies_once_serving_takes_its_whole_server_down(sandbox):
    rec = await until_it_fails(reference(sandbox, nodes=2, failures={"decode@1": "crash-after-ready"}), "decode@1")
    async with asyncio.timeout(10):
        while "stopped" not in rec.states("decode") and "failed" not in rec.states("decode"):
            await asyncio.sleep(0.05)
    assert "ready" in rec.states("decode")
    assert rank_unit_active(sandbox, None) != "active"


async def test_a_rank_that_never_joins_is_named_while_rank_0_waits_for_it(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, nodes=2, timeout="6s", failures={"decode@1": "hang-dist"}))
    told = [n.text for n in rec.of(Notice) if n.service == "decode@1"]
    assert any(text.startswith("decode: rank 1 on gpu1: this rank cannot reach the rendezvous") and
               "in distributed init" in text for text in told), told
    assert any(text.startswith("decode: rank 1 on gpu1: no line for ") and "in distributed init" in text
               for text in told), told       # a stall, named by the rank's node
    # Rank 0 waits at the rendezvous: as a server of one node, a timed-out rank is left as it runs, to be looked at.
    assert {rec.states("decode")[-1], rec.states("decode@1")[-1]} <= {"timed_out", "stopped"}
    # Both ranks wait in distributed init with the same timeout: whichever is judged first times out, the other is
    # stopped with its server.
    assert any("stuck in distributed init" in done.failures[name] for name in ("decode", "decode@1")), done.failures


async def test_restarting_one_rank_restarts_every_rank_of_its_server(sandbox):
    rec = Recorder()
    orchestrator = Orchestrator(reference(sandbox, nodes=2), Registry(make_host), timing=FAST)
    orchestrator.subscribe(rec)
    try:
        assert (await orchestrator.run()).ok
        assert orchestrator.restart("decode@1", RestartHow.NOW)
        async with asyncio.timeout(20):
            while rec.states("decode").count("ready") < 2 or rec.states("decode@1").count("ready") < 2:
                await asyncio.sleep(0.05)
        assert rec.states("decode").count("starting") == 2 and rec.states("decode@1").count("starting") == 2
    finally:
        await orchestrator.close()


async def test_a_retry_starts_every_rank_again(sandbox):
    rec = Recorder()
    orchestrator = Orchestrator(reference(sandbox, nodes=2, failures={"decode@1": "crash"}), Registry(make_host), timing=FAST)
    orchestrator.subscribe(rec)
    try:
        assert not (await orchestrator.run()).ok
        assert orchestrator.retry("decode")       # its rank 1 failed: the server's retry
        async with asyncio.timeout(20):
            while rec.states("decode@1").count("failed") < 2:
                await asyncio.sleep(0.05)
        assert rec.states("decode").count("starting") == 2
    finally:
        await orchestrator.close()


async def test_down_of_one_rank_stops_its_whole_server_and_nothing_else(sandbox):
    deployment = reference(sandbox, nodes=2)
    assert (await bring_up(deployment))[0].ok
    done, rec, _ = await bring_up(deployment, intent=Intent(Verb.DOWN, services=("decode@1",)))
    assert done.ok, done
    assert rec.states("decode")[-1] == rec.states("decode@1")[-1] == "stopped"
    assert "stopped" not in rec.states("prefill") and rank_unit_active(sandbox, "gpu1") != "active"


def over_ssh(sandbox, servers, failures=None):
    """The demo's two-node deployment (``failures`` as ``--fail``) with gpu0 and gpu1 reached over real SSH: each
    its own sshd on 127.0.0.1 running that machine's systemctl, journalctl and nvidia-smi."""
    deployment = reference(sandbox, nodes=2, failures=failures)
    config = yaml.safe_load((sandbox.root / "demo.yaml").read_text())
    machines = {"gpu0": sandbox, "gpu1": sandbox.nodes()[0]}
    config["hosts"] = {name: {"address": "127.0.0.1", "port": server.port, "sysfs": config["hosts"][name]["sysfs"],
                              "commands": {tool: str(machines[name].bin_dir / tool)
                                           for tool in ("systemctl", "journalctl", "nvidia-smi")}}
                       for name, server in zip(machines, servers, strict=True)}
    assert deployment.services["decode@1"].host == "gpu1"
    return parse_config(yaml.safe_dump(config, sort_keys=False), str(sandbox.root / "ssh.yaml"))


def ssh_servers(sshd_factory, ssh_home) -> list:
    servers = [sshd_factory.start() for _ in range(2)]
    for server in servers:
        trust(ssh_home, server)
    return servers


async def test_over_ssh_a_two_node_decode_comes_up_ready_one_connection_per_host(sandbox, sshd_factory, ssh_home):
    servers = ssh_servers(sshd_factory, ssh_home)
    done, rec, _ = await bring_up(over_ssh(sandbox, servers))
    assert done.ok, done
    assert rec.index("decode@1", "ready") < rec.index("router", "starting")
    assert [s.accepted_connections() for s in servers] == [1, 1]     # one connection per host, every rank's too


async def test_over_ssh_a_rank_killed_fails_its_server_and_stops_its_peer(sandbox, sshd_factory, ssh_home):
    servers = ssh_servers(sshd_factory, ssh_home)
    rec = await until_it_fails(over_ssh(sandbox, servers, {"decode@1": "crash-after-ready"}), "decode@1")
    # Rank 0's lines (gloo: its peer closed) may come before rank 1's own over the other connection: the cause is
    # still rank 1's crash, and rank 0 is stopped, or found dead of its peer's end.
    told = [n.text for n in rec.of(Notice) if n.level == "error" and n.service == "decode"]
    assert any(text.startswith("decode: rank 1 on gpu1 failed") for text in told), told
    assert rec.states("decode")[-1] in ("stopped", "failed") and rank_unit_active(sandbox, None) != "active"
