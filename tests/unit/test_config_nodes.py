"""A server over several nodes in the config: its ranks as services, their flags, units and readiness."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdtui.config import ConfigError, load_config, parse_config
from pdtui.servers.sglang.launch import command_line
from pdtui.targets.systemd.unit_files import render_units

SAMPLE = Path(__file__).parents[2] / "sample_configs" / "wide-ep.yaml"


def wide(**decode) -> dict:
    """A prefill on gpu-a, a decode over gpu-b and gpu-c, a router on gpu-a: as YAML would hold them."""
    return {
        "name": "wide",
        "hosts": {"gpu-a": {"address": "10.0.0.1"}, "gpu-b": {"address": "10.0.0.2"},
                  "gpu-c": {"address": "10.0.0.3"}},
        "services": {
            "prefill": {"host": "gpu-a", "unit": "p", "role": "prefill", "gpus": [0, 1], "port": 30000,
                        "launch": {"model": "m"}},
            "decode": {"hosts": ["gpu-b", "gpu-c"], "unit": "d", "role": "decode", "gpus": [0, 1, 2, 3],
                       "port": 30000, "launch": {"model": "m"}, **decode},
            "router": {"host": "gpu-a", "unit": "r", "role": "router", "port": 8000, "launch": {}},
        },
    }


def load(config: dict):
    return parse_config(yaml.safe_dump(config, sort_keys=False), "wide.yaml")


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_each_node_after_the_first_is_a_rank_of_its_own_named_after_its_server():
    dep = load(wide())
    assert list(dep.services) == ["prefill", "decode", "decode@1", "router"]
    rank1 = dep.services["decode@1"]
    assert (rank1.host, rank1.rank, rank1.server, rank1.follower, rank1.unit) == ("gpu-c", 1, "decode", True,
                                                                                  "d.service")
    assert (dep.services["decode"].host, dep.services["decode"].rank) == ("gpu-b", 0)
    assert dep.ranks_of("decode") == dep.ranks_of("decode@1") == ("decode", "decode@1")
    assert dep.ranks_of("prefill") == ("prefill",)


def test_every_rank_is_told_the_group_it_joins_at_rank_0s_address():
    dep = load(wide())
    for rank, name in enumerate(("decode", "decode@1")):
        argv = command_line(dep, dep.services[name])
        assert (flag(argv, "--nnodes"), flag(argv, "--node-rank")) == ("2", str(rank))
        assert flag(argv, "--dist-init-addr") == "10.0.0.2:50000"
        assert flag(argv, "--tp") == "8"       # tp is the server's: its GPUs on every node
    assert "--nnodes" not in command_line(dep, dep.services["prefill"])


def test_the_rendezvous_address_and_port_can_be_given():
    dep = load(wide(launch={"model": "m", "dist_port": 5757, "dist_addr": "192.168.7.2"}))
    assert flag(command_line(dep, dep.services["decode@1"]), "--dist-init-addr") == "192.168.7.2:5757"


def test_a_server_whose_nodes_are_all_this_machine_meets_on_loopback():
    config = wide()
    config["hosts"] = {name: {"local": True} for name in config["hosts"]}
    config["services"]["decode"]["hosts"] = ["gpu-b", {"host": "gpu-c", "port": 30010, "unit": "d1"}]
    dep = load(config)
    rank1 = dep.services["decode@1"]
    assert (rank1.port, rank1.unit) == (30010, "d1.service")
    assert flag(command_line(dep, rank1), "--dist-init-addr") == "127.0.0.1:50000"


def test_a_node_may_name_gpus_and_numa_of_its_own():
    dep = load(wide(hosts=["gpu-b", {"host": "gpu-c", "gpus": [4, 5, 6, 7], "numa": 1}]))
    assert (dep.services["decode@1"].gpus, dep.services["decode@1"].numa) == ((4, 5, 6, 7), 1)
    assert dep.services["decode"].gpus == (0, 1, 2, 3)


def test_the_router_is_given_rank_0_alone_and_waits_for_the_server():
    dep = load(wide())
    argv = command_line(dep, dep.services["router"])
    assert argv.count("--decode") == 1 and flag(argv, "--decode") == "http://10.0.0.2:30000"
    assert dep.services["router"].after == ("prefill", "decode")
    assert dep.dependents("decode@1") == dep.dependents("decode") == ["router"]


def test_a_rank_above_0_is_ready_at_its_dummy_health_server_not_the_ready_line():
    dep = load(wide())
    ready = dep.services["decode@1"].ready
    assert "Dummy health check server started" in (ready.log or "") and ready.http == "/health"
    assert dep.services["decode"].ready.log == "fired up and ready"


def test_a_ranks_unit_is_never_restarted_by_systemd_alone():
    units = {(u.service): u.text for u in render_units(load(wide()))}
    assert "Restart=no" in units["decode@1"] and "Restart=no" in units["decode"]
    assert "Restart=on-failure" in units["prefill"]
    assert "--node-rank 1" in units["decode@1"]


def test_the_wide_ep_sample_is_4_prefill_nodes_and_9_decode_nodes():
    dep = load_config(SAMPLE)
    assert dep.ranks_of("prefill") == ("prefill", *(f"prefill@{r}" for r in range(1, 4)))
    assert len(dep.ranks_of("decode")) == 9
    assert sum(len(svc.gpus) for svc in dep.services.values()) == 104
    router = command_line(dep, dep.services["router"])
    assert router.count("--prefill") == 1 and router.count("--decode") == 1


@pytest.mark.parametrize(("decode", "fragment"), [
    ({"launch": {"model": "m", "tp": 7}}, "tp 7 of service 'decode' does not divide among its 2 nodes"),
    ({"hosts": ["gpu-b", {"host": "gpu-c", "gpus": [0]}]}, "rank 1 of service 'decode' on 'gpu-c' has 1 GPUs"),
    ({"hosts": ["gpu-b", "gpu-x"]}, "unknown host 'gpu-x' for rank 1"),
    ({"hosts": ["gpu-b", {"host": "gpu-a", "port": 30000}]},
     "rank 1 of service 'decode': port 30000 on host 'gpu-a' is already used by service 'prefill'"),
])
def test_a_wide_server_that_cannot_work_is_one_line(decode, fragment):
    with pytest.raises(ConfigError) as caught:
        load(wide(**decode))
    assert fragment in caught.value.message
