"""One host's RDMA devices, their ports' states and NUMA nodes, whether GPU memory can be registered with them, and
its network interfaces, read from sysfs in one read-only remote command.

The tree is read under a root the host's config names (``sysfs:``, ``/sys`` by
default), so tests and the demo point it at a tree of their own. What is read:

- ``class/infiniband/DEV/ports/N/state``: ``4: ACTIVE`` (``1: DOWN``, ``2: INIT``...)
- ``class/infiniband/DEV/device/numa_node``: the NIC's NUMA node (``-1``: none)
- ``module/nvidia_peermem/initstate`` (or MLNX's older ``nv_peer_mem``): ``live``
  while the module that lets a NIC reach GPU memory is loaded.
- ``class/net/IF/operstate``: each network interface (``eth0``, ``ib0``, ``lo``)
  and its state (``up``, ``down``, ``unknown``...): the devices UCX's TCP
  transport names, as ``UCX_NET_DEVICES`` names them (an RDMA port is
  ``mlx5_0:1`` there).

A tree that cannot be entered is no fabric at all (the check says so and is
skipped); a tree without ``module/`` leaves the module unknown, and one without
``class/net/`` the interfaces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pdtui.hosts.base import Host, HostError

COMMAND_TIMEOUT = 10.0
ACTIVE_STATES = ("ACTIVE", "ACTIVE_DEFER")
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
DOWN_INTERFACES = ("down", "lowerlayerdown", "notpresent")     # operstate words of an interface that carries nothing

# Run in the tree's root: marks the tree's parts that exist, then every file of interest as grep -H prints it,
# "path:content". A host's GPU inventory runs it in its own command (gpus/nvidia_smi.inventory_argv).
READ = """echo @root
[ -d module ] && echo @modules
[ -d class/net ] && echo @net
grep -H . class/infiniband/*/ports/*/state class/infiniband/*/device/numa_node class/net/*/operstate \
  module/nvidia_peermem/initstate module/nv_peer_mem/initstate 2>/dev/null"""
_SCRIPT = f"""cd -- "$1" 2>/dev/null || exit 3
{READ}
exit 0"""


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    """One RDMA device (``mlx5_0``): each port's state word, and the NUMA node of its PCI function."""

    name: str
    ports: Mapping[int, str] = field(default_factory=dict)
    numa: int | None = None
    active: bool = field(init=False, compare=False)     # a port is up (read once: every server of the host asks)

    def __post_init__(self) -> None:
        object.__setattr__(self, "active", any(state in ACTIVE_STATES for state in self.ports.values()))

    def port_states(self) -> str:
        """``port 1: DOWN, port 2: ACTIVE``, or ``no port``."""
        return ", ".join(f"port {n}: {s}" for n, s in sorted(self.ports.items())) or "no port"


@dataclass(frozen=True, slots=True)
class Fabric:
    """What one host has for moving KV: its RDMA devices, whether GPU memory can be registered with them (None: its
    modules could not be read) and its network interfaces by their state (None: not read)."""

    host: str
    root: str
    devices: Mapping[str, RdmaDevice]
    peermem: bool | None
    interfaces: Mapping[str, str] | None = None
    active: tuple[str, ...] = field(init=False, compare=False)    # the devices with a port up

    def __post_init__(self) -> None:
        object.__setattr__(self, "active", tuple(name for name, device in self.devices.items() if device.active))

    def names(self) -> str:
        return ", ".join(self.devices) or "none"

    def ucx_names(self, most: int = 16) -> str:
        """Every net device as UCX names it: each RDMA port (``mlx5_0:1``), then each interface (``eth0``); past
        ``most`` (a host of containers has an interface each), how many more."""
        ports = [f"{name}:{port}" for name, device in self.devices.items() for port in sorted(device.ports)]
        names = [*ports, *(self.interfaces or {})]
        more = f" and {len(names) - most} more" if len(names) > most else ""
        return (", ".join(names[:most]) + more) or "none"

    def states(self) -> str:
        """Every device's ports, as a finding quotes them: ``mlx5_0 port 1: DOWN; mlx5_1 port 1: DOWN``."""
        return "; ".join(f"{name} {device.port_states()}" for name, device in self.devices.items())


def fabric_argv(root: str) -> list[str]:
    return ["sh", "-c", _SCRIPT, "pdtui-fabric", root]


def parse_fabric(host: str, root: str, text: str) -> Fabric | None:
    """What :func:`fabric_argv` printed; None when the tree could not be entered."""
    lines = text.splitlines()
    if "@root" not in lines:
        return None
    ports: dict[str, dict[int, str]] = {}
    numa: dict[str, int | None] = {}
    peermem = False if "@modules" in lines else None
    interfaces: dict[str, str] | None = {} if "@net" in lines else None
    for line in lines:
        path, _, value = line.partition(":")
        parts = path.split("/")
        depth, top = len(parts), parts[0]
        if top == "module" and depth == 3 and parts[1] in PEERMEM_MODULES:
            peermem = peermem or value.strip() == "live"
        elif depth == 4 and top == "class" and parts[1] == "net" and parts[3] == "operstate":
            if interfaces is not None and parts[2].isprintable() and parts[2]:
                interfaces[parts[2]] = _state(value).lower()
        elif depth < 5 or top != "class" or parts[1] != "infiniband":
            continue
        elif depth == 6 and parts[3] == "ports" and parts[4].isdigit():
            ports.setdefault(parts[2], {})[int(parts[4])] = _state(value)
        elif depth == 5 and parts[3] == "device" and parts[4] == "numa_node":
            node = value.strip()
            numa[parts[2]] = int(node) if node.isdigit() else None
    names = sorted({*ports, *numa})
    devices = {name: RdmaDevice(name, ports.get(name, {}), numa.get(name)) for name in names}
    return Fabric(host, root, devices, peermem, interfaces)


def _state(value: str) -> str:
    """``4: ACTIVE`` as its word, ``ACTIVE``; anything else as it is, cut short and printable."""
    word = value.partition(":")[2].strip() if ":" in value else value.strip()
    if not word.isprintable():
        word = "".join(ch for ch in word if ch.isprintable())
    return word[:24] or "?"


async def read_fabric(host: Host, root: str, *, timeout: float = COMMAND_TIMEOUT) -> Fabric | None:
    """``host``'s fabric under ``root``; None when it cannot be read (no such tree, no shell, no connection)."""
    try:
        result = await host.run(fabric_argv(root), timeout=timeout, read_only=True)
    except HostError:
        return None
    return parse_fabric(host.name, root, result.stdout) if result.ok else None
