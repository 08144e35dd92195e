"""The cluster's login host over real SSH: submitting, squeue, following every job's output and probing the nodes
all travel through one connection, as a host's commands, journal and probes do."""

from __future__ import annotations

import yaml

from pdtui.config import parse_config
from pdtui.sim import demo
from pdtui.sim.slurm_cluster import PrivateCluster
from tests.engine_helpers import bring_up
from tests.sshd import trust


async def test_the_reference_jobs_come_up_through_one_ssh_connection_to_the_login_host(slurm: PrivateCluster, sshd,
                                                                                      ssh_home) -> None:
    trust(ssh_home, sshd)
    local = demo.build_slurm(slurm, demo.DemoOptions({}, 0.6, "60s", router="sim", reference_ports=False))
    config = yaml.safe_load((slurm.root / "demo.yaml").read_text())
    config["clusters"]["slurm"] = {**{k: v for k, v in config["clusters"]["slurm"].items() if k != "local"},
                                   "address": "127.0.0.1", "port": sshd.port}
    deployment = parse_config(yaml.safe_dump(config), local.source)
    done, rec, _ = await bring_up(deployment)
    assert done.ok, done
    assert rec.change("router", "ready").node == slurm.node
    assert sshd.accepted_connections() == 1
