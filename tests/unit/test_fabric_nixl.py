"""The fabric check of servers that move KV with NIXL through UCX: the host's interfaces read beside its RDMA devices,
what a server's environment tells UCX, each judged against the host; a pair on one host across NUMA nodes; and vLLM's
NIXL side channel against the other ports of its host."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from pdtui.config import parse_config
from pdtui.fabric.findings import Server, fabric_mismatches, pair_numa_mismatches
from pdtui.fabric.side_channel import side_channel_mismatches
from pdtui.fabric.sysfs import Fabric, RdmaDevice, fabric_argv, parse_fabric
from pdtui.fabric.topo import parse_links
from pdtui.fabric.ucx import Ucx, nixl_ucx
from pdtui.servers import ServerCommand, TransferPath, serving_for
from pdtui.sim.nvidia_smi import topology
from pdtui.sim.sysfs import FabricShape, write_tree

NIXL = TransferPath("nixl", False)
SGLANG = ("python", "-m", "sglang.launch_server", "--disaggregation-mode", "decode",
          "--disaggregation-transfer-backend", "nixl")


def fabric(*devices: RdmaDevice, interfaces: dict[str, str] | None = None) -> Fabric:
    return Fabric("gpu1", "/sys", {d.name: d for d in devices}, True,
                  {"lo": "unknown", "eth0": "up"} if interfaces is None else interfaces)


def up(name: str, numa: int | None = 0) -> RdmaDevice:
    return RdmaDevice(name, {1: "ACTIVE"}, numa)


def down(name: str) -> RdmaDevice:
    return RdmaDevice(name, {1: "DOWN"}, 0)


def server(tls: str | None = None, devices: str = "", *, elsewhere: bool = True,
           numa: dict[int, int | None] | None = None) -> Server:
    ucx = Ucx(tls, tuple(d for d in devices.split(",") if d))
    return Server("decode", "gpu1", NIXL, "its unit sglang-decode.service on gpu1", numa or {0: 0}, None, ucx,
                  elsewhere)


def judged(found) -> list[tuple[str, str]]:
    return [(m.level, m.setting) for m in found]


# --------------------------------------------------------------------------- what is read

def read(root: Path) -> Fabric | None:
    done = subprocess.run(fabric_argv(str(root)), capture_output=True, text=True, timeout=10)
    return parse_fabric("gpu1", str(root), done.stdout) if done.returncode == 0 else None


def test_the_same_command_reads_the_hosts_interfaces_and_their_states(tmp_path):
    write_tree(tmp_path, FabricShape(devices={"mlx5_0": 0}))
    for name, state in (("eth0", "up"), ("ib0", "down"), ("lo", "unknown")):
        (tmp_path / "class" / "net" / name).mkdir(parents=True)
        (tmp_path / "class" / "net" / name / "operstate").write_text(f"{state}\n")
    found = read(tmp_path)
    assert found is not None and found.interfaces == {"eth0": "up", "ib0": "down", "lo": "unknown"}
    assert found.ucx_names() == "mlx5_0:1, eth0, ib0, lo"
    many = Fabric("h", "/sys", {}, None, {f"veth{n}": "up" for n in range(40)})
    assert many.ucx_names().endswith("veth15 and 24 more")


def test_a_tree_without_class_net_leaves_the_interfaces_unknown(tmp_path):
    write_tree(tmp_path, FabricShape())
    assert read(tmp_path).interfaces is None
    text = "@root\n@net\nclass/net/eth\x1b[31m0/operstate:up\nclass/net/eth1/operstate:up\n"
    assert parse_fabric("h", "/sys", text).interfaces == {"eth1": "up"}       # a name no terminal should print: left


def sglang(**env: str) -> ServerCommand:
    return ServerCommand(SGLANG, env, "x")


def vllm(config: dict, **env: str) -> ServerCommand:
    return ServerCommand(("vllm", "serve", "m", "--kv-transfer-config", json.dumps(config)), env, "x")


def test_what_ucx_is_told_is_read_from_the_servers_environment():
    assert nixl_ucx(NIXL, sglang()) == Ucx()
    assert nixl_ucx(NIXL, sglang(UCX_TLS="rc,cuda_copy", UCX_NET_DEVICES="mlx5_0:1, mlx5_1:1")) == \
        Ucx("rc,cuda_copy", ("mlx5_0:1", "mlx5_1:1"))
    assert nixl_ucx(NIXL, sglang(UCX_NET_DEVICES="all")) == Ucx()
    assert nixl_ucx(TransferPath("mooncake", True), sglang()) is None


def test_only_nixl_through_its_ucx_plugin_is_judged():
    assert nixl_ucx(NIXL, sglang(SGLANG_DISAGGREGATION_NIXL_BACKEND="LIBFABRIC")) is None
    assert nixl_ucx(NIXL, sglang(SGLANG_DISAGGREGATION_NIXL_BACKEND="UCX")) == Ucx()
    nixl = {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert nixl_ucx(NIXL, vllm(nixl)) == Ucx()
    assert nixl_ucx(NIXL, vllm({**nixl, "kv_connector_extra_config": {"backends": ["UCX", "GDS"]}})) == Ucx()
    assert nixl_ucx(NIXL, vllm({**nixl, "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}})) is None


@pytest.mark.parametrize(("tls", "rdma_only", "allows_rdma"), [
    (None, False, True), ("all", False, True), ("rc", True, True), ("rc_x,ud_x,cuda_copy,cuda_ipc", True, True),
    (r"\rc_mlx5,self,gdr_copy", True, True), ("rc,ud:aux,cuda_copy", True, True), ("rc,tcp", False, True),
    ("rc,sm,cuda_ipc", False, True), ("tcp,cuda_copy", False, False), ("^ib", False, False), ("^tcp", False, True),
    ("cuda_copy", False, False)])
def test_ucx_tls_leaves_rdma_alone_only_when_every_transport_it_names_needs_rdma_or_rides_beside(tls, rdma_only,
                                                                                              allows_rdma):
    assert (Ucx(tls).rdma_only, Ucx(tls).allows_rdma) == (rdma_only, allows_rdma)


@pytest.mark.parametrize(("tls", "gpu_ipc"), [(None, True), ("all", True), ("rc,cuda_copy,cuda_ipc", True),
                                              ("rc,cuda", True), ("rc,cuda_copy", False), ("^cuda_ipc", False),
                                              ("^tcp", True)])
def test_ucx_tls_leaves_gpu_to_gpu_copies_within_a_host_unless_it_leaves_cuda_ipc_out(tls, gpu_ipc):
    assert Ucx(tls).gpu_ipc is gpu_ipc


# --------------------------------------------------------------------------- UCX_NET_DEVICES

def test_a_named_rdma_port_the_host_lacks_is_refused_in_one_line_naming_server_host_and_device():
    [found] = fabric_mismatches(server(devices="mlx5_3:1"), fabric(up("mlx5_0")))
    assert (found.level, found.kind, found.services, found.setting) == ("error", "fabric", ("decode",),
                                                                        "UCX_NET_DEVICES")
    assert found.values == ("mlx5_3:1", "mlx5_0:1, lo, eth0")
    assert found.text == ("decode: UCX_NET_DEVICES names mlx5_3:1, which gpu1 does not have (it has mlx5_0:1, lo, "
                          "eth0): UCX only warns ('network device ... is not available') and is left with none of "
                          "the devices it was given")
    assert found.sources == ("its unit sglang-decode.service on gpu1", "/sys/class/infiniband on gpu1")


def test_a_missing_device_beside_one_that_is_there_is_refused_too_saying_what_ucx_goes_on_with():
    [found] = fabric_mismatches(server(devices="mlx5_0:1,mlx5_1:1"), fabric(up("mlx5_0")))
    assert found.level == "error" and found.text.endswith("and goes on with mlx5_0:1 only")
    [port] = fabric_mismatches(server(devices="mlx5_0:2"), fabric(up("mlx5_0")))
    assert port.level == "error" and "names mlx5_0:2, which gpu1 does not have" in port.text


def test_a_named_port_that_is_down_and_a_device_named_without_its_port_are_refused():
    [downs] = fabric_mismatches(server(devices="mlx5_0:1"), fabric(down("mlx5_0")))
    assert downs.level == "error" and downs.values == ("mlx5_0:1", "DOWN")
    assert "names mlx5_0:1, whose port is not active on gpu1 (DOWN): UCX cannot use it" in downs.text
    [bare] = fabric_mismatches(server(devices="mlx5_0"), fabric(up("mlx5_0")))
    assert bare.level == "error" and "names mlx5_0 without its port" in bare.text and "(mlx5_0:1)" in bare.text


def test_a_named_interface_is_judged_against_class_net_and_not_told_when_that_was_not_read():
    assert fabric_mismatches(server(devices="eth0"), fabric()) == []
    [missing] = fabric_mismatches(server(devices="eth9"), fabric())
    assert missing.level == "error" and missing.sources[1] == "/sys/class/net on gpu1"
    [downs] = fabric_mismatches(server(devices="eth0"), fabric(interfaces={"eth0": "down"}))
    assert downs.level == "error" and "names eth0, which is down on gpu1" in downs.text
    unread = Fabric("gpu1", "/sys", {}, None, None)
    assert fabric_mismatches(server(devices="eth9"), unread) == []


def test_a_named_port_on_another_numa_node_than_the_servers_gpus_is_a_warning_where_kv_leaves_the_host():
    [found] = fabric_mismatches(server(devices="mlx5_1:1", numa={4: 1}), fabric(up("mlx5_1", numa=0)))
    assert (found.level, found.setting) == ("warning", "NIC NUMA node")
    assert fabric_mismatches(server(devices="mlx5_1:1", numa={4: 1}, elsewhere=False), fabric(up("mlx5_1", numa=0))) \
        == []                                                   # its pair never leaves the host: cuda_ipc, no NIC
    [nic] = fabric_mismatches(server("rc,cuda_copy", "mlx5_1:1", numa={4: 1}, elsewhere=False),
                              fabric(up("mlx5_1", numa=0)))     # ... unless UCX_TLS leaves cuda_ipc out
    assert nic.setting == "NIC NUMA node"


# --------------------------------------------------------------------------- UCX_TLS, and nothing named

@pytest.mark.parametrize(("devices", "named", "lack"), [
    ((), "", "gpu1 has no RDMA device"), ((down("mlx5_0"),), "", "no RDMA port on gpu1 is active"),
    ((up("mlx5_0"),), "eth0", "UCX_NET_DEVICES=eth0 names none of the active RDMA ports of gpu1 (mlx5_0:1)")])
def test_ucx_tls_of_rdma_transports_alone_without_an_rdma_port_to_use_is_refused(devices, named, lack):
    [found] = fabric_mismatches(server("rc,cuda_copy", named), fabric(*devices))
    assert (found.level, found.setting) == ("error", "UCX_TLS")
    assert found.text.startswith(f"decode: UCX_TLS=rc,cuda_copy allows only RDMA transports and {lack}")
    assert found.text.endswith("UCX has no transport to move the KV by, and NIXL fails to connect")
    left = fabric_mismatches(server("rc,tcp,cuda_copy", named), fabric(*devices))     # TCP left to it: no refusal
    assert [m.level for m in left] == ([] if named else ["warning"])


def test_nothing_named_and_no_rdma_port_is_a_warning_of_tcp_only_with_a_peer_on_another_host():
    [none] = fabric_mismatches(server(), fabric())
    [downs] = fabric_mismatches(server(), fabric(down("mlx5_0")))
    assert none.level == downs.level == "warning"
    assert none.text == ("decode: gpu1 has no RDMA device (nothing under /sys/class/infiniband): UCX moves the KV to "
                         "its peers on other hosts over TCP, which works, slowly")
    assert "no RDMA port on gpu1 is active (mlx5_0 port 1: DOWN)" in downs.text
    assert fabric_mismatches(server(elsewhere=False), fabric()) == []        # its peers on its own host
    assert fabric_mismatches(server(), fabric(up("mlx5_0"))) == []
    assert fabric_mismatches(server("tcp,cuda_copy"), fabric()) == []         # TCP chosen
    assert fabric_mismatches(server(devices="eth0"), fabric()) == []          # ... by its device


def test_a_server_not_through_ucx_is_left_to_the_mooncake_rules():
    plain = Server("decode", "gpu1", NIXL, "x", {0: 0})
    assert fabric_mismatches(plain, fabric()) == []


# --------------------------------------------------------------------------- a pair on one host

def side(name: str, gpus: range, node: int | None) -> Server:
    return Server(name, "gpu0", NIXL, f"its unit {name}.service on gpu0", dict.fromkeys(gpus, node))


def test_a_same_host_pair_across_numa_nodes_is_warned_of_unless_nvlink_joins_them():
    prefill, decode = side("prefill", range(4), 0), side("decode", range(4, 8), 1)
    [found] = pair_numa_mismatches(prefill, decode, None)
    assert (found.level, found.kind, found.services, found.values) == ("warning", "fabric", ("decode", "prefill"),
                                                                       ("node 0", "node 1"))
    assert found.text == ("prefill and decode move KV over NIXL on gpu0 from GPUs 0-3 (NUMA node 0) to GPUs 4-7 "
                          "(node 1): every transfer crosses the CPUs' interconnect unless NVLink joins their GPUs "
                          "(nvidia-smi topo -m did not say)")
    assert pair_numa_mismatches(prefill, decode, parse_links("\n".join(topology()))) == []     # NV18 everywhere
    pcie = {(p, d): "SYS" for p in range(4) for d in range(4, 8)}
    [smp] = pair_numa_mismatches(prefill, decode, pcie)
    assert smp.text.endswith("nvidia-smi topo -m says SYS between GPU 0 and GPU 4: every transfer crosses the CPUs' "
                             "interconnect")
    [some] = pair_numa_mismatches(prefill, decode, pcie | {(0, 4): "NV4"})
    assert "(15 of their 16 GPU pairs): those transfers cross" in some.text


def test_a_pair_on_one_node_or_with_a_node_unknown_is_not_told():
    assert pair_numa_mismatches(side("prefill", range(2), 0), side("decode", range(2, 4), 0), None) == []
    assert pair_numa_mismatches(side("prefill", range(2), 0), side("decode", range(2, 4), None), None) == []


PCIE_TOPO = """\
\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tSYS\tPIX\t0-31\t0\t\tN/A
GPU1\tSYS\t X \tSYS\t32-63\t1\t\tN/A
NIC0\tPIX\tSYS\t X
"""


def test_the_gpu_paths_are_read_from_topo_m_whatever_its_padding():
    assert parse_links(PCIE_TOPO) == {(0, 0): "X", (0, 1): "SYS", (1, 0): "SYS", (1, 1): "X"}
    assert parse_links(PCIE_TOPO.replace("\t", "    ")) == parse_links(PCIE_TOPO)
    links = parse_links("\n".join(topology()))
    assert links[(0, 7)] == "NV18" and links[(3, 3)] == "X" and len(links) == 64
    assert parse_links("nvidia-smi: command not found\n") == {}


# --------------------------------------------------------------------------- vLLM's side channel

def deployment(prefill_env: dict, decode_env: dict | None = None, *, prefill_args: tuple[str, ...] = ()):
    def server(role: str, port: int, env: dict, args: tuple[str, ...] = ()) -> dict:
        return {"host": "box", "unit": f"vllm-{role}", "role": role, "port": port,
                "launch": {"model": "/models/tiny", "env": env, "args": list(args)}}
    config = {"name": "tiny", "engine": "vllm", "hosts": {"box": {"address": "10.0.0.1"}},
              "services": {"prefill": server("prefill", 18200, prefill_env, prefill_args),
                           "decode": server("decode", 18300, decode_env or {}),
                           "router": {"host": "box", "unit": "vllm-router", "role": "router", "port": 18000,
                                      "launch": {"prometheus_port": 29100}}}}
    return parse_config(yaml.safe_dump(config, sort_keys=False), "tiny.yaml")


def side_channels(dep) -> list:
    return side_channel_mismatches(dep, [[(cfg, serving_for(cfg).planned_command(dep, cfg))
                                          for cfg in dep.services.values()]])


def test_a_side_channel_port_that_is_another_servers_http_port_is_refused_naming_both():
    [found] = side_channels(deployment({"VLLM_NIXL_SIDE_CHANNEL_PORT": "18300"}))
    assert (found.level, found.kind, found.services, found.setting) == ("error", "host", ("prefill", "decode"),
                                                                        "NIXL side channel")
    assert found.text == ("prefill's NIXL side-channel port 18300 (VLLM_NIXL_SIDE_CHANNEL_PORT) is decode's HTTP "
                          "port on box: whichever binds it second fails, and vLLM's side channel hangs at start "
                          "rather than exits on it")
    assert found.sources == ("its launch: block in tiny.yaml", "decode in tiny.yaml")


@pytest.mark.parametrize(("port", "said"), [("18200", "is its own HTTP port"), ("18000", "is router's port"),
                                            ("29100", "is router's metrics port")])
def test_a_side_channel_port_that_is_its_own_or_the_routers_is_refused(port, said):
    [found] = side_channels(deployment({"VLLM_NIXL_SIDE_CHANNEL_PORT": port}))
    assert found.level == "error" and said in found.text


def test_side_channels_of_data_parallel_ranks_that_reach_anothers_are_refused_and_one_port_for_two_left_to_vllm():
    [found] = side_channels(deployment({"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}, {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5601"},
                                       prefill_args=("--data-parallel-size", "2")))
    assert found.values == ("5600-5601", "5601") and "share 5601 on box" in found.text
    same = deployment({"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}, {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"})
    assert side_channels(same) == []            # servers/vllm/pairing.py's host check refuses it
    assert side_channels(deployment({})) == []  # the ports pdtui gives: each its own


def test_sglangs_nixl_servers_have_no_side_channel_to_judge():
    dep = parse_config(yaml.safe_dump({
        "name": "s", "hosts": {"box": {"address": "10.0.0.1"}},
        "services": {"prefill": {"host": "box", "unit": "p", "role": "prefill", "port": 5600,
                                 "launch": {"model": "m", "transfer_backend": "nixl"}}}}), "s.yaml")
    assert side_channels(dep) == []
