"""Inventory and preflight findings on the sim: the messages the user sees, through a LocalHost."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from pdtui.config import parse_config
from pdtui.gpus.inventory import Finding, Inventory, gpu_hosts, host_hardware, inventory, preflight_findings
from pdtui.gpus.nvidia_smi import Gpu
from pdtui.hosts.base import Result
from pdtui.hosts.local import LocalHost
from pdtui.sim.nvidia_smi import SimGpu
from tests.engine_helpers import pd_deployment


def deployment(sandbox, prefill=(0, 1, 2, 3), decode=(4, 5, 6, 7), *, prefill_numa=0, decode_numa=1,
               strict=False, nvidia_smi=None):
    commands = {**sandbox.commands, **({"nvidia-smi": nvidia_smi} if nvidia_smi else {})}
    numa = {"prefill": {"numa": prefill_numa} if prefill_numa is not None else {},
            "decode": {"numa": decode_numa} if decode_numa is not None else {}}
    return pd_deployment({"prefill": {"unit": "p", "gpus": list(prefill), "port": 31000, **numa["prefill"]}},
                         {"decode": {"unit": "d", "gpus": list(decode), "port": 31002, **numa["decode"]}},
                         router={"unit": "r", "port": 31001}, name="t", strict=strict,
                         hosts={"gpu0": {"local": True, "commands": commands}})


async def findings(deployment):
    host_cfg = deployment.hosts["gpu0"]
    inv = await inventory(LocalHost("gpu0"), host_cfg.commands["nvidia-smi"])
    return preflight_findings(deployment, {"gpu0": inv})


async def test_the_reference_split_passes(sandbox):
    assert await findings(deployment(sandbox)) == []


async def test_sim_inventory_lists_eight_h100_with_numa_from_topo(sandbox):
    sysfs = Path("/sys/bus/pci/devices/0000:18:00.0")
    assert not sysfs.exists(), "this machine has a PCI device where the sim puts GPU 0"
    inv = await inventory(LocalHost("gpu0"), sandbox.commands["nvidia-smi"])
    assert [(g.index, g.name, g.bus_id) for g in inv.gpus[:2]] == [
        (0, "NVIDIA H100 80GB HBM3", "00000000:18:00.0"), (1, "NVIDIA H100 80GB HBM3", "00000000:2A:00.0")]
    assert dict(inv.numa) == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert inv.apps == ()


async def test_a_gpu_that_does_not_exist_is_an_error(sandbox):
    assert await findings(deployment(sandbox, prefill=(0, 1, 2, 8))) == [
        Finding("error", "prefill", "prefill: GPU 8 does not exist on gpu0 (it has GPUs 0-7)")]


async def test_gpus_on_the_other_numa_node_are_a_warning(sandbox):
    assert await findings(deployment(sandbox, prefill_numa=1)) == [
        Finding("warning", "prefill", "prefill: GPUs 0-3 are on NUMA 0, not NUMA 1 as configured")]


async def test_gpus_spread_over_two_nodes_are_a_warning(sandbox):
    got = await findings(deployment(sandbox, prefill=(0, 1), decode=(2, 3, 4, 5), decode_numa=None))
    assert got == [Finding("warning", "decode", "decode: GPUs are spread over NUMA 0 (GPUs 2, 3) and "
                                                "NUMA 1 (GPUs 4, 5): cross-node traffic costs throughput")]


async def test_spread_gpus_with_a_declared_node(sandbox):
    got = await findings(deployment(sandbox, prefill=(0, 1), decode=(2, 3, 4, 5)))
    assert got == [Finding("warning", "decode", "decode: GPUs are spread over NUMA 0 (GPUs 2, 3) and "
                                                "NUMA 1 (GPUs 4, 5), not all on NUMA 1 as configured")]


async def test_strict_turns_numa_warnings_into_errors(sandbox):
    got = await findings(deployment(sandbox, prefill_numa=1, strict=True))
    assert [(f.level, f.service) for f in got] == [("error", "prefill")]


async def test_busy_gpu_names_pid_and_process(sandbox):
    sandbox.set_gpu_busy(2, 70312, pids=[(4242, "/usr/bin/python3", 70304)], utilization=97)
    assert await findings(deployment(sandbox)) == [Finding(
        "warning", "prefill",
        "prefill: a GPU on gpu0 already in use: GPU 2 70312 MiB used by PID 4242 /usr/bin/python3")]


async def test_memory_used_without_a_listed_process_is_busy(sandbox):
    sandbox.set_gpu_busy(5, 2048)
    sandbox.set_gpu_busy(6, 40000, pids=[(77, "python3", 20000), (78, "python3", 20000)])
    assert await findings(deployment(sandbox)) == [Finding(
        "warning", "decode",
        "decode: 2 GPUs on gpu0 already in use: GPU 5 2048 MiB used; GPU 6 40000 MiB used by PID 77 python3, "
        "PID 78 python3")]


async def test_memory_under_the_threshold_is_not_busy(sandbox):
    sandbox.set_gpu_busy(5, 600)
    assert await findings(deployment(sandbox)) == []


async def test_strict_turns_busy_gpus_into_errors(sandbox):
    sandbox.set_gpu_busy(5, 2048)
    assert [f.level for f in await findings(deployment(sandbox, strict=True))] == ["error"]


async def test_process_names_are_made_inert(sandbox):
    sandbox.set_gpu_busy(1, 9000, pids=[(31, "evil\x1b]52;c;AAAA\x07", 9000)])
    (finding,) = await findings(deployment(sandbox))
    assert "\x1b" not in finding.text and "\x07" not in finding.text
    assert finding.text.startswith("prefill: a GPU on gpu0 already in use: GPU 1 9000 MiB used by PID 31 evil")


async def test_a_running_sim_worker_fills_its_gpus(sandbox):
    """The stand-in follows the sandbox: a started worker unit holds memory on its --gpus."""
    unit = sandbox.add_unit("w", [sys.executable, "-m", "pdtui.sim.worker", "--role", "decode", "--port", "0",
                                  "--startup", "30", "--gpus", "4,5"])
    started = await LocalHost().run([*sandbox.commands["systemctl"], "start", unit], timeout=30)
    assert started.ok, started.stderr
    inv = await inventory(LocalHost("gpu0"), sandbox.commands["nvidia-smi"])
    pid = sandbox.store.read_state(unit).child[0]
    assert {app.pid for app in inv.apps} == {pid}
    assert [len(inv.apps_on(i)) for i in range(8)] == [0, 0, 0, 0, 1, 1, 0, 0]
    assert inv.gpu(4).memory_used_mib > 500 and inv.gpu(3).memory_used_mib == 1
    (finding,) = preflight_findings(deployment(sandbox), {"gpu0": inv})
    assert finding.service == "decode" and "GPU 4 " in finding.text and f"by PID {pid} " in finding.text


def test_prefill_and_decode_sharing_a_gpu_is_an_error():
    """The config refuses this already; the check stays as a last line of defence."""
    svc = lambda role, gpus: SimpleNamespace(host="gpu0", role=role, gpus=gpus, numa=None)  # noqa: E731
    deployment = SimpleNamespace(strict=False, services={"prefill": svc("prefill", (0, 1, 2, 3)),
                                                         "decode": svc("decode", (3, 4))})
    inv = Inventory("gpu0", tuple(Gpu(i, f"GPU-{i}", memory_used_mib=1) for i in range(8)), numa={})
    assert preflight_findings(deployment, {"gpu0": inv}) == [
        Finding("error", "decode", "prefill and decode share GPU 3 on gpu0: each GPU may serve one backend")]


@pytest.mark.parametrize("nvidia_smi", [["/nonexistent/nvidia-smi"], ["false"],
                                        ["sh", "-c", "echo 'No devices were found'", "nvidia-smi"]])
async def test_missing_or_failing_nvidia_smi_means_unavailable(sandbox, nvidia_smi):
    assert await findings(deployment(sandbox, nvidia_smi=nvidia_smi)) == [Finding(
        "warning", None, "GPU info unavailable on gpu0: nvidia-smi missing or failing, GPU and NUMA checks skipped")]


def test_hosts_worth_an_inventory_are_those_with_gpu_services(sandbox):
    assert gpu_hosts(deployment(sandbox)) == ["gpu0"]


class CountingHost(LocalHost):
    """This machine, counting the commands it is asked to run by their program and script."""

    def __init__(self) -> None:
        super().__init__("box")
        self.asked: list[str] = []

    async def run(self, argv, *, timeout=None, read_only=False) -> Result:
        self.asked.append(argv[3] if argv[0] == "sh" else " ".join(argv[-2:]))
        return await super().run(argv, timeout=timeout, read_only=read_only)


async def test_the_inventory_is_one_remote_command_where_sysfs_gives_every_gpus_numa_node(sandbox):
    host = CountingHost()
    inv = await inventory(host, sandbox.commands["nvidia-smi"], sysfs=str(sandbox.sysfs))
    assert dict(inv.numa) == {i: SimGpu(i).numa for i in range(8)} and len(inv.gpus) == 8
    assert host.asked == ["pdtui-gpus"]


async def test_a_gpu_whose_numa_node_sysfs_leaves_unknown_is_looked_up_in_topo(sandbox):
    (sandbox.sysfs / "bus" / "pci" / "devices" / "0000:9a:00.0" / "numa_node").write_text("-1\n")   # GPU 4
    host = CountingHost()
    inv = await inventory(host, sandbox.commands["nvidia-smi"], sysfs=str(sandbox.sysfs))
    assert dict(inv.numa) == {i: SimGpu(i).numa for i in range(8)}
    assert host.asked == ["pdtui-gpus", "topo -m"]


async def test_without_a_sysfs_tree_the_numa_nodes_come_from_topo(sandbox, tmp_path):
    host = CountingHost()
    inv = await inventory(host, sandbox.commands["nvidia-smi"], sysfs=str(tmp_path / "none"))
    assert dict(inv.numa) == {i: SimGpu(i).numa for i in range(8)} and host.asked == ["pdtui-gpus", "topo -m"]


async def test_inventories_are_taken_for_gpu_hosts_only(sandbox):
    config = {"name": "t", "hosts": {"gpu0": {"local": True, "commands": sandbox.commands},
                                     "gpu1": {"local": True, "commands": {"nvidia-smi": "/nonexistent/nvidia-smi"}},
                                     "cpu": {"local": True, "commands": sandbox.commands}},
              "services": {"prefill": {"host": "gpu0", "unit": "p", "role": "prefill", "gpus": [0], "port": 31000},
                           "decode": {"host": "gpu1", "unit": "d", "role": "decode", "gpus": [0], "port": 31002},
                           "router": {"host": "cpu", "unit": "r", "role": "router", "port": 31001}}}
    deployment = parse_config(yaml.safe_dump(config), "t.yaml")
    hosts = {name: LocalHost(name) for name in deployment.hosts}
    found = {name: inventory for name, (inventory, _) in (await host_hardware(deployment, hosts)).items()}
    assert set(found) == {"gpu0", "gpu1"} and found["gpu1"] is None and len(found["gpu0"].gpus) == 8


def test_unknown_numa_nodes_are_told_not_judged(sandbox):
    inv = Inventory("gpu0", tuple(Gpu(i, f"GPU-{i}", memory_used_mib=1) for i in range(8)), numa={})
    assert preflight_findings(deployment(sandbox, decode_numa=None), {"gpu0": inv}) == [
        Finding("info", "prefill", "prefill: NUMA node of GPUs 0-3 unknown on gpu0, numa: 0 not checked")]
