"""The whole bring-up over real SSH: the sim deployment behind sshd on 127.0.0.1."""

from __future__ import annotations

from pdtui.sim.ports import free_port
from tests.engine_helpers import bring_up, router_argv, sim_deployment, worker_argv
from tests.sshd import trust


def ssh_host(sandbox, port: int) -> dict:
    """A deployment host entry reaching this machine through sshd on ``port``."""
    return {"address": "127.0.0.1", "port": port,
            "commands": {"systemctl": str(sandbox.bin_dir / "systemctl"),
                         "journalctl": str(sandbox.bin_dir / "journalctl")}}


def reference_over(sandbox, hosts: dict[str, dict], placement: dict[str, str], router: str | None = None):
    p, d, r, boot = (free_port() for _ in range(4))
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot),
                    {"host": placement["prefill"], "role": "prefill", "port": p, "timeout": "30s"}),
        "decode": (worker_argv("decode", d, bootstrap=boot),
                   {"host": placement["decode"], "role": "decode", "port": d, "timeout": "30s"}),
        "router": (router_argv(r, [(p, boot)], [d], package=router),
                   {"host": placement["router"], "role": "router", "port": r, "timeout": "30s"}),
    }
    return sim_deployment(sandbox, services, hosts=hosts)


async def test_full_bring_up_over_one_ssh_connection(sandbox, sshd, ssh_home, real_router):
    trust(ssh_home, sshd)
    deployment = reference_over(sandbox, {"gpu0": ssh_host(sandbox, sshd.port)},
                                {"prefill": "gpu0", "decode": "gpu0", "router": "gpu0"}, real_router)
    done, rec, _ = await bring_up(deployment)
    assert done.ok, done
    smoke = [e for e in rec.events if getattr(e, "check", None) == "smoke"]
    assert smoke[-1].ok
    # Every command, the journal tail and every HTTP probe went over one connection.
    assert sshd.accepted_connections() == 1


async def test_three_hosts_three_connections_one_each(sandbox, sshd_factory, ssh_home, real_router):
    servers = [sshd_factory.start() for _ in range(3)]
    for server in servers:
        trust(ssh_home, server)
    hosts = {f"h{i}": ssh_host(sandbox, s.port) for i, s in enumerate(servers)}
    deployment = reference_over(sandbox, hosts, {"prefill": "h0", "decode": "h1", "router": "h2"}, real_router)
    done, rec, _ = await bring_up(deployment)
    assert done.ok, done
    assert [s.accepted_connections() for s in servers] == [1, 1, 1]


async def test_unknown_host_key_fails_the_bring_up_in_one_line(sandbox, sshd, ssh_home):
    deployment = reference_over(sandbox, {"gpu0": ssh_host(sandbox, sshd.port)},
                                {"prefill": "gpu0", "decode": "gpu0", "router": "gpu0"})
    done, rec, _ = await bring_up(deployment)
    assert not done.ok
    # Preflight reaches the host before anything is started: every service there fails with the reason.
    for service in ("prefill", "decode", "router"):
        assert rec.states(service) == ["failed"]
        reason = done.failures[service]
        assert "--accept-new" in reason and sshd.fingerprint in reason and "\n" not in reason
