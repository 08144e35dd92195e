"""A server that moves KV over RDMA, against what its host has: refusals where the transfer surely fails, warnings
where it may (docs/preflight.md says why each is which).

- A device the server names (``--disaggregation-ib-device``) that the host
  lacks, or whose every port is down: refused. Mooncake registers the KV
  cache with the named devices after the weights are loaded, and fails there.
- Named nothing, and the host has no RDMA device, or none with a port up:
  a warning. Mooncake then picks what it finds, or falls back to TCP (it
  logs ``No RDMA devices found``): the pair works, slowly.
- ``nvidia_peermem`` not loaded where RDMA devices are used: a warning. The
  NIC cannot reach GPU memory through it, and registration fails unless the
  kernel and driver offer dma-buf instead, which pdtui cannot read.
- The unit may pin less memory than it registers: refused when it runs as
  another user than root (root holds CAP_IPC_LOCK, which lifts the limit).
- A named device on another NUMA node than every GPU of the server: a
  warning (each transfer crosses the CPUs' interconnect).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pdtui.fabric.sysfs import Fabric
from pdtui.servers import Mismatch, TransferPath

MEMLOCK_FIX = "LimitMEMLOCK=infinity in its unit (pdtui units makes it so)"
PEERMEM_FIX = "modprobe nvidia_peermem"


@dataclass(frozen=True, slots=True)
class MemoryLock:
    """How much memory a unit may pin (``limit`` in bytes, None: no limit) and the user it runs as ('': root)."""

    limit: int | None
    user: str = ""

    @property
    def binds(self) -> bool:
        """Whether the limit holds: root's CAP_IPC_LOCK lifts it."""
        return self.limit is not None and self.user not in ("", "root", "0")


@dataclass(frozen=True, slots=True)
class Server:
    """One server as the fabric check sees it: where it runs, how it moves KV, and what its host told of it."""

    name: str
    host: str
    path: TransferPath
    source: str                                   # where its command line was read
    gpu_numa: Mapping[int, int | None]            # its GPUs' NUMA nodes, as far as known
    memory_lock: MemoryLock | None = None         # None: not known for this target


def fabric_mismatches(server: Server, fabric: Fabric) -> list[Mismatch]:
    """Everything that keeps ``server`` from moving KV over ``fabric``, its host's."""
    if not server.path.rdma:
        return []
    if server.path.devices:
        found = _named(server, fabric)
        used = any(name in fabric.devices and fabric.devices[name].active for name in server.path.devices)
    else:
        found = _unnamed(server, fabric)
        used = bool(fabric.active)
    if not used:
        return found          # no RDMA transfer will be tried: what registering needs is not in question
    return [*found, *_peermem(server, fabric), *_memory_lock(server)]


def _where(fabric: Fabric) -> str:
    return f"{fabric.root}/class/infiniband on {fabric.host}"


def _finding(level: str, server: Server, setting: str, values: tuple[str, str], there: str, text: str) -> Mismatch:
    return Mismatch(level, "fabric", (server.name,), setting, values, (server.source, there), f"{server.name}: {text}")


def _named(server: Server, fabric: Fabric) -> list[Mismatch]:
    found = []
    for name in server.path.devices:
        device = fabric.devices.get(name)
        if device is None:
            have = f"it has {fabric.names()}" if fabric.devices else f"no RDMA device under {_where(fabric)}"
            found.append(_finding("error", server, "IB device", (name, fabric.names()), _where(fabric),
                                  f"--disaggregation-ib-device names {name}, which {fabric.host} does not have "
                                  f"({have}): Mooncake fails to register the KV cache with it, after the weights "
                                  f"load"))
        elif not device.active:
            found.append(_finding("error", server, "IB port", (name, device.port_states()), _where(fabric),
                                  f"{name} on {fabric.host} has no active port ({device.port_states()}): no KV "
                                  f"moves over it"))
        else:
            found += _numa(server, fabric, name, device.numa)
    return found


def _unnamed(server: Server, fabric: Fabric) -> list[Mismatch]:
    if not fabric.devices:
        return [_finding("warning", server, "RDMA devices", (server.path.backend, "none"), _where(fabric),
                         f"{fabric.host} has no RDMA device (nothing under {fabric.root}/class/infiniband): Mooncake "
                         f"falls back to TCP, which works, slowly")]
    if not fabric.active:
        return [_finding("warning", server, "IB port", ("active", fabric.states()), _where(fabric),
                         f"no RDMA port on {fabric.host} is active ({fabric.states()}): Mooncake's transfers "
                         f"cannot use them")]
    return []


def _numa(server: Server, fabric: Fabric, name: str, node: int | None) -> list[Mismatch]:
    gpu_nodes = sorted({n for n in server.gpu_numa.values() if n is not None})
    if node is None or not gpu_nodes or node in gpu_nodes:
        return []
    nodes = ", ".join(map(str, gpu_nodes))
    return [_finding("warning", server, "NIC NUMA node", (f"{name} on node {node}", f"GPUs on node {nodes}"),
                     f"{fabric.root}/class/infiniband/{name}/device/numa_node on {fabric.host}",
                     f"{name} is on NUMA node {node}, its GPUs on node {nodes}: every transfer crosses the CPUs' "
                     f"interconnect (name a device on node {nodes})")]


def _peermem(server: Server, fabric: Fabric) -> list[Mismatch]:
    if fabric.peermem is not False:
        return []
    return [_finding("warning", server, "nvidia_peermem", ("loaded", "not loaded"),
                     f"{fabric.root}/module on {fabric.host}",
                     f"nvidia_peermem is not loaded on {fabric.host}: without it the RDMA devices cannot reach GPU "
                     f"memory and Mooncake's registration fails (unless the kernel and driver give dma-buf); "
                     f"{PEERMEM_FIX}")]


def _memory_lock(server: Server) -> list[Mismatch]:
    lock = server.memory_lock
    if lock is None or not lock.binds or lock.limit is None:
        return []
    return [_finding("error", server, "LimitMEMLOCK", (_bytes(lock.limit), "infinity"),
                     f"systemctl show on {server.host}",
                     f"its unit runs as {lock.user} and may lock {_bytes(lock.limit)} of memory: Mooncake pins "
                     f"what it registers for RDMA and fails; {MEMLOCK_FIX}")]


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"

