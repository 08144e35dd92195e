"""The fabric check of NIXL servers as the preflight runs it, in this process on in-memory hosts (pdtui/sim/memhost.py)
and a fake clock: what each host is asked, in the commands it already answers, and what a finding does to the
bring-up."""

from __future__ import annotations

import asyncio

import pytest

from pdtui.config import load_config
from pdtui.engine.events import Done, PreflightFinding
from pdtui.engine.intent import Intent, Verb
from pdtui.engine.orchestrator import Orchestrator
from pdtui.sim import memhost
from pdtui.sim.memhost import MemoryFleet, MemoryHost
from pdtui.sim.nvidia_smi import topology
from pdtui.sim.sysfs import FabricShape, listing
from pdtui.support.data import data_dir
from pdtui.targets.registry import Registry
from pdtui.targets.systemd.commands import START_AND_SHOW
from tests.engine_helpers import Recorder, pd_deployment

REFERENCE = load_config(data_dir("sample_configs") / "reference.yaml")

pytestmark = pytest.mark.looptime


def deployment(env: dict[str, str] | None = None, *, engine: str = "sglang", decode_host: str = "gpu0",
               prefill_gpus: tuple[int, ...] = (0, 1, 2, 3), decode_gpus: tuple[int, ...] = (4, 5, 6, 7),
               decode_env: dict[str, str] | None = None):
    """The reference shape, its servers launched with NIXL (``env``: their launch's own; ``decode_env``: the
    decode's instead)."""
    def launch(given: dict[str, str] | None) -> dict:
        return {"model": "m", "env": given or {}, **({"transfer_backend": "nixl"} if engine == "sglang" else {})}

    hosts = {"gpu0": {"address": "gpu0.internal"}, "gpu1": {"address": "gpu1.internal"}}
    return pd_deployment(
        {"prefill": {"gpus": list(prefill_gpus), "port": 30000, "launch": launch(env),
                     **({"bootstrap_port": 8998} if engine == "sglang" else {})}},
        {"decode": {"host": decode_host, "gpus": list(decode_gpus), "port": 30002,
                    "launch": launch(env if decode_env is None else decode_env)}},
        router={"timeout": "2m"}, name="memory", timeout="10m", unit_prefix="nixl-", hosts=hosts, engine=engine)


async def bring_up(dep) -> tuple[Done, Recorder]:
    fleet = MemoryFleet(dep, startup=30.0, router_startup=2.0)
    orchestrator = Orchestrator(dep, Registry(fleet.host), clock=asyncio.get_running_loop().time, intent=Intent(Verb.UP))
    recorder = Recorder()
    orchestrator.subscribe(recorder)
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
        fleet.stop_all()
    return done, recorder


def findings(recorder: Recorder) -> list[tuple[str, str, str]]:
    return [(f.level, f.service, f.text) for f in recorder.of(PreflightFinding)]


@pytest.fixture
def asked(monkeypatch) -> list[tuple[str, str]]:
    """Every command the memory hosts run, as (host, what)."""
    said: list[tuple[str, str]] = []
    run = MemoryHost.run

    async def recorded(host, argv, *, timeout=None, read_only=False):
        said.append((host.name, argv[3] if argv[0] == "sh" else " ".join(argv[:2])))
        return await run(host, argv, timeout=timeout, read_only=read_only)

    monkeypatch.setattr(MemoryHost, "run", recorded)
    return said


def answering_topo(monkeypatch, text: str) -> None:
    """The memory hosts' nvidia-smi answers ``topo -m`` with ``text``."""
    answer = MemoryHost._nvidia_smi

    def topo(host, args):
        return (0, text, "") if args[:1] == ["topo"] else answer(host, args)

    monkeypatch.setattr(MemoryHost, "_nvidia_smi", topo)


async def test_a_ucx_device_the_host_lacks_refuses_both_servers_and_nothing_starts(asked):
    done, rec = await bring_up(deployment({"UCX_NET_DEVICES": "mlx5_9:1"}))
    assert not done.ok
    refused = [(level, service) for level, service, text in findings(rec) if "UCX_NET_DEVICES names mlx5_9:1" in text]
    assert refused == [("error", "prefill"), ("error", "decode")]
    assert rec.states("router")[-1] == "blocked"
    assert not any(what == START_AND_SHOW for _, what in asked)
    assert [what for _, what in asked].count("pdtui-gpus") == 1, "the interfaces come in the inventory's one command"


async def test_a_same_host_pair_across_numa_nodes_is_warned_of_once_topo_cannot_say_and_the_bring_up_goes_on(asked):
    done, rec = await bring_up(deployment())
    assert done.ok
    assert findings(rec) == [("warning", "decode", "prefill and decode move KV over NIXL on gpu0 from GPUs 0-3 (NUMA "
                                                   "node 0) to GPUs 4-7 (node 1): every transfer crosses the CPUs' "
                                                   "interconnect unless NVLink joins their GPUs (nvidia-smi topo -m did "
                                                   "not say)")]
    assert [what for _, what in asked].count("nvidia-smi topo") == 1


async def test_nvlink_between_the_pairs_gpus_as_topo_says_it_is_no_finding(asked, monkeypatch):
    answering_topo(monkeypatch, "\n".join(topology()))
    done, rec = await bring_up(deployment())
    assert done.ok and findings(rec) == []


async def test_a_pair_on_one_numa_node_asks_nothing_more(asked):
    done, rec = await bring_up(deployment(prefill_gpus=(0, 1), decode_gpus=(2, 3)))
    assert done.ok and findings(rec) == []
    assert "nvidia-smi topo" not in [what for _, what in asked]


async def test_no_rdma_port_on_either_host_of_a_pair_warns_each_server_of_tcp(monkeypatch):
    monkeypatch.setattr(memhost, "FABRIC", listing(FabricShape(devices={})))
    done, rec = await bring_up(deployment(decode_host="gpu1", decode_gpus=(0, 1, 2, 3)))
    assert done.ok
    tcp = [(level, service) for level, service, text in findings(rec) if "over TCP, which works, slowly" in text]
    assert tcp == [("warning", "prefill"), ("warning", "decode")]


async def test_no_rdma_port_on_one_host_whose_pair_never_leaves_it_is_not_told(monkeypatch, asked):
    monkeypatch.setattr(memhost, "FABRIC", listing(FabricShape(devices={})))
    answering_topo(monkeypatch, "\n".join(topology()))
    done, rec = await bring_up(deployment())
    assert done.ok and findings(rec) == []


async def test_rdma_transports_alone_on_a_host_without_an_rdma_port_are_refused(monkeypatch):
    monkeypatch.setattr(memhost, "FABRIC", listing(FabricShape(port_state={"mlx5_0": "1: DOWN", "mlx5_1": "1: DOWN",
                                                                           "mlx5_2": "1: DOWN", "mlx5_3": "1: DOWN"})))
    done, rec = await bring_up(deployment({"UCX_TLS": "rc,cuda_copy,cuda_ipc"}))
    assert not done.ok
    refused = {service for level, service, text in findings(rec)
               if level == "error" and "UCX_TLS=rc,cuda_copy,cuda_ipc allows only RDMA transports and no RDMA port on "
                                       "gpu0 is active" in text}
    assert refused == {"prefill", "decode"}


async def test_a_vllm_side_channel_on_another_servers_port_is_refused_before_anything_starts(asked):
    done, rec = await bring_up(deployment({"VLLM_NIXL_SIDE_CHANNEL_PORT": "30002"}, engine="vllm", decode_env={}))
    assert not done.ok
    [side] = [(level, service, text) for level, service, text in findings(rec) if "side-channel" in text]
    assert side == ("error", "prefill", "prefill's NIXL side-channel port 30002 (VLLM_NIXL_SIDE_CHANNEL_PORT) "
                                        "is decode's HTTP port on gpu0: whichever binds it second fails, and vLLM's "
                                        "side channel hangs at start rather than exits on it")
    assert not any(what == START_AND_SHOW for _, what in asked)


async def test_the_reference_sample_on_its_box_moves_kv_over_nixl_with_nothing_to_tell(asked, monkeypatch):
    """mlx5_0:1 up (UCX_NET_DEVICES), GPUs 0-3 and 4-7 on two NUMA nodes joined by NVLink, as topo -m says."""
    answering_topo(monkeypatch, "\n".join(topology()))
    done, rec = await bring_up(REFERENCE)
    assert done.ok and findings(rec) == []
    assert [what for _, what in asked].count("nvidia-smi topo") == 1


async def test_the_reference_sample_where_its_nic_is_missing_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(memhost, "FABRIC", listing(FabricShape(devices={"mlx5_1": 0})))
    done, rec = await bring_up(REFERENCE)
    assert not done.ok
    assert {(level, service) for level, service, text in findings(rec) if "names mlx5_0:1, which gpu0 does not have "
                                                                          "(it has mlx5_1:1)" in text} == \
        {("error", "prefill"), ("error", "decode")}
