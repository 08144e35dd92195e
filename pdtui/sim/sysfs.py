"""A sysfs tree of the sim's own, for the preflight to read: RDMA devices, their ports' states and NUMA nodes, the
module that lets a NIC reach GPU memory, and the sim's GPUs as PCI devices with their NUMA nodes. The demo's host
config points ``sysfs:`` at it, and ``--fail fabric:MODE`` writes it broken; a sandbox's is a healthy box's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pdtui.sim import nvidia_smi

# What the sim's box has: a NIC per GPU pair, each on its GPUs' NUMA node (as sim/nvidia_smi's topo -m says).
DEMO_DEVICES = {f"mlx5_{nic}": nvidia_smi.SimGpu(nic * nvidia_smi.COUNT // nvidia_smi.NICS).numa
                for nic in range(nvidia_smi.NICS)}


def nic_beside(gpu: int) -> str:
    """The NIC that shares ``gpu``'s PCIe switch (the one a server on it names)."""
    return f"mlx5_{gpu * nvidia_smi.NICS // nvidia_smi.COUNT}"


@dataclass(frozen=True, slots=True)
class FabricShape:
    """The devices (name → NUMA node), any port state other than ``4: ACTIVE``, and whether the module is loaded."""

    devices: dict[str, int] = field(default_factory=lambda: dict(DEMO_DEVICES))
    port_state: dict[str, str] = field(default_factory=dict)
    peermem: bool = True

    @classmethod
    def failing(cls, mode: str | None) -> FabricShape:
        """The demo host's fabric, broken as ``mode`` (one of knobs.FABRIC_FAIL_MODES) says."""
        if mode == "port-down":
            return cls(port_state=dict.fromkeys(DEMO_DEVICES, "1: DOWN"))
        if mode == "no-device":
            return cls(devices={})
        if mode == "no-peermem":
            return cls(peermem=False)
        if mode == "numa":
            return cls(devices={name: 1 - node for name, node in DEMO_DEVICES.items()})
        return cls()


def write_tree(root: Path, shape: FabricShape) -> Path:
    """Write ``shape`` as sysfs lays it out under ``root`` (made if missing); returns ``root``."""
    (root / "module").mkdir(parents=True, exist_ok=True)
    infiniband = root / "class" / "infiniband"
    infiniband.mkdir(parents=True, exist_ok=True)
    for name, node in shape.devices.items():
        (infiniband / name / "ports" / "1").mkdir(parents=True, exist_ok=True)
        (infiniband / name / "device").mkdir(exist_ok=True)
        (infiniband / name / "ports" / "1" / "state").write_text(shape.port_state.get(name, "4: ACTIVE") + "\n")
        (infiniband / name / "device" / "numa_node").write_text(f"{node}\n")
    for gpu in range(nvidia_smi.COUNT):       # the sim's GPUs, each with its node, as the box's PCI devices
        device = root / "bus" / "pci" / "devices" / f"0000:{nvidia_smi.BUS_NUMBERS[gpu].lower()}:00.0"
        device.mkdir(parents=True, exist_ok=True)
        (device / "numa_node").write_text(f"{nvidia_smi.SimGpu(gpu).numa}\n")
    if shape.peermem:
        (root / "module" / "nvidia_peermem").mkdir(exist_ok=True)
        (root / "module" / "nvidia_peermem" / "initstate").write_text("live\n")
    return root


def listing(shape: FabricShape) -> str:
    """What the preflight's fabric command prints for a tree of ``shape`` (an in-memory host answers with it)."""
    lines = ["@root", "@modules"]
    lines += [f"class/infiniband/{name}/ports/1/state:{shape.port_state.get(name, '4: ACTIVE')}"
              for name in shape.devices]
    lines += [f"class/infiniband/{name}/device/numa_node:{node}" for name, node in shape.devices.items()]
    if shape.peermem:
        lines.append("module/nvidia_peermem/initstate:live")
    return "\n".join(lines) + "\n"
