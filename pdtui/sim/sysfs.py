"""A sysfs tree of the sim's own, for the preflight's fabric check to read: RDMA devices, their ports' states and
NUMA nodes, and the module that lets a NIC reach GPU memory. The demo's host config points ``sysfs:`` at it; the
demo's ``--fail fabric:MODE`` writes it broken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# What the demo's host has: one NIC per NUMA node, each beside that node's GPUs (sim/nvidia_smi's 0-3 and 4-7).
DEMO_DEVICES = {"mlx5_0": 0, "mlx5_1": 1}


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
