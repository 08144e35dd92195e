"""The fabric check: a host's sysfs read in one command, and each server that moves KV over RDMA judged against it."""

import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdtui.fabric.findings import MemoryLock, Server, fabric_mismatches
from pdtui.fabric.sysfs import Fabric, RdmaDevice, fabric_argv, parse_fabric
from pdtui.servers import ServerCommand, TransferPath
from pdtui.servers.sglang.pairing import transfer_path
from pdtui.sim.sysfs import FabricShape, listing, write_tree

MOONCAKE = TransferPath("mooncake", True)


def fabric(*devices: RdmaDevice, peermem: bool | None = True) -> Fabric:
    return Fabric("gpu1", "/sys", {d.name: d for d in devices}, peermem)


def up(name: str, numa: int | None = 0) -> RdmaDevice:
    return RdmaDevice(name, {1: "ACTIVE"}, numa)


def down(name: str) -> RdmaDevice:
    return RdmaDevice(name, {1: "DOWN"}, 0)


def server(path: TransferPath = MOONCAKE, *, numa: dict[int, int | None] | None = None,
           lock: MemoryLock | None = None) -> Server:
    return Server("decode", "gpu1", path, "its unit sglang-decode.service on gpu1", numa or {0: 0}, lock)


def read(root) -> Fabric | None:
    """The tree under ``root`` as the real command reads it (a real shell and grep)."""
    done = subprocess.run(fabric_argv(str(root)), capture_output=True, text=True, timeout=10)
    return parse_fabric("gpu1", str(root), done.stdout) if done.returncode == 0 else None


def test_the_command_reads_each_devices_ports_numa_node_and_the_peermem_module(tmp_path):
    write_tree(tmp_path, FabricShape(devices={"mlx5_0": 0, "mlx5_1": 1}, port_state={"mlx5_1": "1: DOWN"}))
    found = read(tmp_path)
    assert found == Fabric("gpu1", str(tmp_path), {"mlx5_0": RdmaDevice("mlx5_0", {1: "ACTIVE"}, 0),
                                                   "mlx5_1": RdmaDevice("mlx5_1", {1: "DOWN"}, 1)}, True)
    assert found.active == ("mlx5_0",)


SEGMENTS = st.sampled_from(["class", "infiniband", "mlx5_0", "ports", "1", "x", "device", "numa_node", "module",
                             "nvidia_peermem", "initstate", ""])
VALUES = st.text(st.characters(blacklist_categories=("Cc", "Zl", "Zp")), max_size=12)    # within one line
LINES = st.lists(st.tuples(st.lists(SEGMENTS, max_size=7), VALUES), max_size=12)


@given(LINES)
def test_any_output_is_read_without_error_and_only_well_formed_lines_name_devices(lines):
    text = "@root\n" + "".join(f"{'/'.join(path)}:{value}\n" for path, value in lines)
    found = parse_fabric("gpu1", "/sys", text)
    assert found is not None
    well_formed = {path[2] for path, _ in lines if path[:2] == ["class", "infiniband"] and (
        (len(path) == 6 and path[3] == "ports" and path[4].isdigit()) or path[3:] == ["device", "numa_node"])}
    assert set(found.devices) == well_formed


def test_a_tree_without_the_module_is_a_module_not_loaded_and_a_missing_tree_no_fabric(tmp_path):
    write_tree(tmp_path / "a", FabricShape(peermem=False))
    assert read(tmp_path / "a").peermem is False
    assert read(tmp_path / "nowhere") is None


def test_a_tree_without_a_module_folder_leaves_the_module_unknown(tmp_path):
    (tmp_path / "class").mkdir()
    found = read(tmp_path)
    assert found is not None and found.devices == {} and found.peermem is None


def test_hostile_file_contents_are_cut_to_printable_words():
    text = "@root\nclass/infiniband/mlx5_0/ports/1/state:4: ACT\x1b[31mIVE\nclass/infiniband/mlx5_0/device/numa_node:x\n"
    device = parse_fabric("h", "/sys", text).devices["mlx5_0"]
    assert device.ports[1].isprintable() and device.numa is None and not device.active


def test_the_transfer_path_is_read_from_sglangs_own_command_line_only():
    def path(*words: str):
        return transfer_path(ServerCommand(("python", "-m", "sglang.launch_server", *words), {}, "x"))
    assert path("--disaggregation-mode", "decode") == TransferPath("mooncake", True)
    assert path("--disaggregation-mode", "decode", "--disaggregation-ib-device", "mlx5_0,mlx5_1") == \
        TransferPath("mooncake", True, ("mlx5_0", "mlx5_1"))
    assert path("--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl").rdma is False
    assert path("--port", "30000") is None


def test_a_named_device_the_host_lacks_is_refused_naming_what_it_has():
    [found] = fabric_mismatches(server(TransferPath("mooncake", True, ("mlx5_3",))), fabric(up("mlx5_0")))
    assert (found.level, found.kind, found.setting, found.values) == ("error", "fabric", "IB device",
                                                                      ("mlx5_3", "mlx5_0"))
    assert "names mlx5_3, which gpu1 does not have (it has mlx5_0)" in found.text


def test_a_named_device_with_every_port_down_is_refused_with_its_ports_states():
    [found] = fabric_mismatches(server(TransferPath("mooncake", True, ("mlx5_0",))), fabric(down("mlx5_0")))
    assert found.level == "error" and "mlx5_0 on gpu1 has no active port (port 1: DOWN)" in found.text


def test_unnamed_devices_missing_or_down_are_warnings_mooncake_picks_or_falls_back_to_tcp():
    [none] = fabric_mismatches(server(), fabric())
    [downs] = fabric_mismatches(server(), fabric(down("mlx5_0")))
    assert none.level == downs.level == "warning"
    assert "falls back to TCP" in none.text and "no RDMA port on gpu1 is active" in downs.text


def test_peermem_not_loaded_is_a_warning_only_where_rdma_is_used():
    [found] = fabric_mismatches(server(), fabric(up("mlx5_0"), peermem=False))
    assert found.level == "warning" and found.setting == "nvidia_peermem" and "modprobe nvidia_peermem" in found.text
    assert fabric_mismatches(server(), fabric(peermem=False))[0].setting == "RDMA devices"   # TCP: no registration
    assert fabric_mismatches(server(), fabric(up("mlx5_0"), peermem=None)) == []            # not known: not told


@pytest.mark.parametrize(("lock", "refused"), [
    (MemoryLock(8 << 20, "sglang"), True), (MemoryLock(8 << 20, ""), False), (MemoryLock(8 << 20, "root"), False),
    (MemoryLock(None, "sglang"), False), (None, False)])
def test_a_finite_memlock_is_refused_unless_root_lifts_it(lock, refused):
    found = fabric_mismatches(server(lock=lock), fabric(up("mlx5_0")))
    assert [f.setting for f in found] == (["LimitMEMLOCK"] if refused else [])
    if refused:
        assert found[0].level == "error" and found[0].values == ("8 MiB", "infinity")


def test_a_named_nic_on_another_numa_node_than_every_gpu_is_a_warning():
    named = TransferPath("mooncake", True, ("mlx5_1",))
    [found] = fabric_mismatches(server(named, numa={4: 0, 5: 0}), fabric(up("mlx5_1", numa=1)))
    assert found.level == "warning" and found.values == ("mlx5_1 on node 1", "GPUs on node 0")
    assert fabric_mismatches(server(named, numa={4: 1}), fabric(up("mlx5_1", numa=1))) == []
    assert fabric_mismatches(server(named, numa={4: None}), fabric(up("mlx5_1", numa=1))) == []


def test_a_backend_that_moves_no_kv_over_rdma_is_not_judged():
    assert fabric_mismatches(server(TransferPath("nixl", False, ("mlx5_9",))), fabric(down("mlx5_0"))) == []


def test_an_in_memory_host_answers_as_the_command_reads_a_written_tree(tmp_path):
    shape = FabricShape.failing("port-down")
    assert parse_fabric("gpu1", "/sys", listing(shape)) == \
        parse_fabric("gpu1", "/sys", subprocess.run(fabric_argv(str(write_tree(tmp_path, shape))), capture_output=True,
                                                    text=True, timeout=10).stdout)
