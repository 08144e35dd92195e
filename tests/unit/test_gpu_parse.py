"""nvidia-smi and sysfs parsers on real-format output (8-GPU boxes, NVLink topologies, N/A values)."""

import shlex
import sys

import pytest

from pdtui.gpus.inventory import hardware
from pdtui.gpus.nvidia_smi import (
    ComputeApp,
    Gpu,
    InventoryText,
    compute_apps_argv,
    inventory_argv,
    parse_compute_apps,
    parse_gpu_line,
    parse_inventory,
    parse_numa_node,
    parse_query_gpu,
    parse_topo,
    query_gpu_argv,
    sampler_argv,
    sysfs_bus_id,
    topo_argv,
)
from pdtui.hosts.local import LocalHost
from pdtui.sim.sysfs import FabricShape, write_tree

H100_BOX = """\
0, GPU-22b2c6ac-2d49-4863-197c-9c469071178a, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 1, 81559, 0
1, GPU-5f6c1a0e-9a41-37b4-7a8e-0f0b3c1e2d11, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 1, 81559, 0
2, GPU-0e9f3c55-2b1d-7c0a-55e1-9a3c7d6f8b20, NVIDIA H100 80GB HBM3, 00000000:3A:00.0, 1, 81559, 0
3, GPU-7a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9, NVIDIA H100 80GB HBM3, 00000000:5D:00.0, 1, 81559, 0
4, GPU-a0b1c2d3-e4f5-0617-2839-4a5b6c7d8e9f, NVIDIA H100 80GB HBM3, 00000000:9A:00.0, 71234, 81559, 97
5, GPU-b1c2d3e4-f506-1728-394a-5b6c7d8e9fa0, NVIDIA H100 80GB HBM3, 00000000:AB:00.0, 71234, 81559, 96
6, GPU-c2d3e4f5-0617-2839-4a5b-6c7d8e9fa0b1, NVIDIA H100 80GB HBM3, 00000000:BA:00.0, 71234, 81559, 98
7, GPU-d3e4f506-1728-394a-5b6c-7d8e9fa0b1c2, NVIDIA H100 80GB HBM3, 00000000:DB:00.0, 71234, 81559, 97
"""

# An HGX H100 (NVLink, 10 NICs), as `nvidia-smi topo -m` prints it: tab separated, an empty cell before GPU NUMA ID.
NVLINK_TOPO = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tNIC2\tNIC3\tNIC4\tNIC5\tNIC6\tNIC7\tNIC8\tNIC9"
    "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    + "".join(
        f"GPU{g}\t" + "\t".join(" X " if g == o else "NV18" for o in range(8))
        + "\t" + "\t".join("PIX" if n == g else "SYS" for n in range(10))
        + ("\t0-47,96-143\t0\t\tN/A\n" if g < 4 else "\t48-95,144-191\t1\t\tN/A\n")
        for g in range(8))
    + "NIC0\tPIX\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\n"
    "\nLegend:\n\n  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"
)

# Eight RTX 4090 on PCIe (SYS everywhere), GPU6 next to the NICs.
PCIE_TOPO = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A
GPU1\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A
GPU2\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A
GPU3\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t0-55,112-167\t0\t\tN/A
GPU4\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\tSYS\t56-111,168-223\t1\t\tN/A
GPU5\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tSYS\tSYS\t56-111,168-223\t1\t\tN/A
GPU6\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tPHB\tPHB\t56-111,168-223\t1\t\tN/A
GPU7\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\t X \tSYS\tSYS\t56-111,168-223\t1\t\tN/A
NIC0\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPHB\tSYS\t X \tPIX
NIC1\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tPHB\tSYS\tPIX\t X
"""

# Copied from a terminal: tabs became spaces; a two-GPU slice on NUMA 3, CPU affinity as a list.
SPACED_TOPO = """\
        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV12    PXB     PXB     0,2,4,6         3               N/A
GPU1    NV12     X      PXB     PXB     0,2,4,6         3               N/A
NIC0    PXB     PXB      X      PXB
"""

# An old driver: no NUMA Affinity column at all.
OLD_TOPO = """\
\tGPU0\tGPU1\tmlx4_0\tCPU Affinity
GPU0\t X \tPIX\tPHB\t0-9,20-29
GPU1\tPIX\t X \tPHB\t0-9,20-29
"""

# A VM: no NUMA information, and the header underlined with terminal escapes.
VM_TOPO = "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-15\tN/A\t\tN/A\n"


def test_eight_gpu_box_parses_every_gpu():
    gpus = parse_query_gpu(H100_BOX)
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[0] == Gpu(0, "GPU-22b2c6ac-2d49-4863-197c-9c469071178a", "NVIDIA H100 80GB HBM3",
                          "00000000:18:00.0", 1, 81559, 0)
    assert (gpus[7].memory_used_mib, gpus[7].utilization) == (71234, 97)


@pytest.mark.parametrize("line, expected", [
    ("0, GPU-1, NVIDIA H100 80GB HBM3, 00000000:18:00.0, N/A, [N/A], [Not Supported]",
     Gpu(0, "GPU-1", "NVIDIA H100 80GB HBM3", "00000000:18:00.0")),
    ("  3 ,   GPU-3 ,  NVIDIA A100-SXM4-80GB  , 00000000:4E:00.0 ,  5 , 81920 ,  12  ",
     Gpu(3, "GPU-3", "NVIDIA A100-SXM4-80GB", "00000000:4E:00.0", 5, 81920, 12)),
    ("2, GPU-2, NVIDIA H100 80GB HBM3", Gpu(2, "GPU-2", "NVIDIA H100 80GB HBM3")),
    ("1, GPU-1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 4 MiB, 81559 MiB, 0 %",
     Gpu(1, "GPU-1", "NVIDIA H100 80GB HBM3", "00000000:2A:00.0", 4, 81559, 0)),
    ("4, [N/A], [N/A], [N/A], 0, 0, 0", Gpu(4, "", "", "", 0, 0, 0)),
])
def test_query_gpu_values_are_read_tolerantly(line, expected):
    assert parse_gpu_line(line) == expected


@pytest.mark.parametrize("junk", [
    "index, uuid, name, pci.bus_id, memory.used [MiB], memory.total [MiB], utilization.gpu [%]",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    "No devices were found",
    "", "   ", "-1, GPU-x, name", "N/A, GPU-x, name",
])
def test_lines_that_are_no_gpu_are_skipped(junk):
    assert parse_query_gpu(f"{junk}\n0, GPU-0, NVIDIA H100 80GB HBM3\n") == [Gpu(0, "GPU-0", "NVIDIA H100 80GB HBM3")]


def test_sample_fields_fill_numbers_only():
    assert parse_gpu_line("5, 71234, 81559, 97", ("index", "memory.used", "memory.total", "utilization.gpu")) \
        == Gpu(5, memory_used_mib=71234, memory_total_mib=81559, utilization=97)


def test_compute_apps_with_units_commas_and_na():
    text = (
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "GPU-22b2c6ac-2d49-4863-197c-9c469071178a, 4242, /usr/bin/python3, 70312 MiB\n"
        "GPU-22b2c6ac-2d49-4863-197c-9c469071178a, 4243, sglang::scheduler, TP0, 512\n"
        "GPU-5f6c1a0e-9a41-37b4-7a8e-0f0b3c1e2d11, 977, [Insufficient Permissions], [N/A]\n"
        "GPU-x, not-a-pid, python3, 1\n"
        "No running processes found\n"
    )
    assert parse_compute_apps(text) == [
        ComputeApp("GPU-22b2c6ac-2d49-4863-197c-9c469071178a", 4242, "/usr/bin/python3", 70312),
        ComputeApp("GPU-22b2c6ac-2d49-4863-197c-9c469071178a", 4243, "sglang::scheduler, TP0", 512),
        ComputeApp("GPU-5f6c1a0e-9a41-37b4-7a8e-0f0b3c1e2d11", 977, "", None),
    ]


def test_no_compute_apps_is_an_empty_list():
    assert parse_compute_apps("") == []


@pytest.mark.parametrize("smi, sysfs", [
    ("00000000:18:00.0", "0000:18:00.0"),
    ("00000000:AB:00.0", "0000:ab:00.0"),
    ("00000001:9A:01.7", "0001:9a:01.7"),
    ("0000:db:00.0", "0000:db:00.0"),
    (" 00000000:5D:00.0\n", "0000:5d:00.0"),
    ("N/A", None),
    ("", None),
    ("00000000:18:00.0/../../..", None),
    ("100000000:18:00.0", None),
])
def test_bus_ids_become_sysfs_names(smi, sysfs):
    assert sysfs_bus_id(smi) == sysfs


@pytest.mark.parametrize("text, node", [
    ("-1\n", None), ("0\n", 0), ("1", 1), ("", None), ("cat: x: No such file", None)])
def test_numa_node_file(text, node):
    assert parse_numa_node(text) == node


def test_the_inventory_commands_output_is_split_into_its_parts_by_their_exit_statuses():
    text = (f"{H100_BOX}@@pdtui 0\nGPU-a0b1c2d3-e4f5-0617-2839-4a5b6c7d8e9f, 4242, python3, 70000\n@@pdtui 0\n"
            "    1     0\n 4242     1\n@@pdtui 0\n"
            "bus/pci/devices/0000:18:00.0/numa_node:0\nbus/pci/devices/0000:9a:00.0/numa_node:-1\n"
            "bus/pci/devices/0000:00:1f.2/numa_node:junk\n")
    found = parse_inventory(text)
    assert found.gpus == H100_BOX and found.apps is not None and "4242" in found.apps
    assert found.processes == "    1     0\n 4242     1\n"
    assert found.numa == {"0000:18:00.0": 0, "0000:9a:00.0": None, "0000:00:1f.2": None}


def test_a_failing_nvidia_smi_leaves_its_part_unknown():
    assert parse_inventory("NVIDIA-SMI has failed\n@@pdtui 9\n@@pdtui 9\n 1 0\n@@pdtui 0\n") == \
        InventoryText(None, None, " 1 0\n", {})
    assert parse_inventory("") == InventoryText(None, None, None, {})


@pytest.mark.parametrize("text, expected", [
    (NVLINK_TOPO, {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}),
    (PCIE_TOPO, {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}),
    (SPACED_TOPO, {0: 3, 1: 3}),
    (OLD_TOPO, {0: None, 1: None}),
    (VM_TOPO, {0: None}),
    ("", {}),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", {}),
])
def test_topo_matrix_gives_numa_per_gpu(text, expected):
    assert parse_topo(text) == expected


def test_argv_builders_use_the_host_prefix():
    prefix = ("sudo", "-n", "nvidia-smi")
    assert query_gpu_argv(prefix) == [*prefix, "--query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total,"
                                               "utilization.gpu", "--format=csv,noheader,nounits"]
    assert compute_apps_argv(prefix) == [*prefix, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                                         "--format=csv,noheader,nounits"]
    assert topo_argv(prefix) == [*prefix, "topo", "-m"]
    assert sampler_argv(prefix) == [*prefix, "--query-gpu=index,memory.used,memory.total,utilization.gpu",
                                    "--format=csv,noheader,nounits", "-lms", "2000"]
    sh, dash_c, script, name, root, mark = inventory_argv(prefix, "/sys", "@@pdtui-1234")
    assert (sh, dash_c, name, root, mark) == ("sh", "-c", "pdtui-gpus", "/sys", "@@pdtui-1234")
    assert f"{shlex.join(query_gpu_argv(prefix))} 2>/dev/null" in script and "bus/pci/devices/*/numa_node" in script


def test_gpu_ranges_are_written_one_way_everywhere():
    from pdtui.gpus.nvidia_smi import gpu_ranges
    assert gpu_ranges([3, 0, 1, 2]) == "0-3"
    assert gpu_ranges([0, 1]) == "0, 1"
    assert gpu_ranges([0, 1, 2, 5]) == "0-2, 5"
    assert gpu_ranges([4, 6, 7]) == "4, 6, 7"


FORGED = "/tmp/x\n@@pdtui 0\n@@pdtui 0\n@@pdtui 0\n@root\nclass/infiniband/mlx5_9/ports/1/state:4: ACTIVE\n"
SMI = ("import sys; args = ' '.join(sys.argv)\n"
       "if '--query-gpu' in args: print('0, GPU-0, NVIDIA H100, 00000000:18:00.0, 10, 81559, 0')\n"
       "if '--query-compute-apps' in args: print('GPU-0, 4242, ' + sys.argv[1] + ', 70000')")


@pytest.mark.parametrize("name", ["python3", FORGED])
async def test_a_gpu_process_named_with_newlines_cannot_end_a_part_or_forge_the_fabric(tmp_path, name):
    root = write_tree(tmp_path / "sys", FabricShape())
    inventory, fabric = await hardware(LocalHost(), [sys.executable, "-c", SMI, name], sysfs=str(root))
    assert inventory is not None and fabric is not None
    assert fabric.active == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")     # no mlx5_9
    assert [app.pid for app in inventory.apps] == [4242]
