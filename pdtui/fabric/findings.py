"""A server that moves KV over RDMA, or with NIXL over UCX, against what its host has: refusals where the transfer
surely fails, warnings where it may (docs/preflight.md says why each is which).

Mooncake (SGLang's default backend):

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

NIXL through UCX (SGLang's ``nixl`` backend, vLLM's NixlConnector; ucx.py reads
what its environment tells UCX):

- A device ``UCX_NET_DEVICES`` names that the host lacks (an RDMA port as
  ``mlx5_0:1``, an interface as ``eth0``), or whose port or interface is down:
  refused. UCX only warns of it and goes on without it.
- ``UCX_TLS`` allowing RDMA transports alone, on a host with no RDMA port up
  (or none ``UCX_NET_DEVICES`` names): refused, UCX has no transport.
- Nothing named, no RDMA port up, and a peer on another host: a warning, UCX
  moves that KV over TCP. A named port on another NUMA node than the server's
  GPUs, with a peer on another host: a warning, as for Mooncake.
- A prefill and a decode of one pair on one host whose GPUs sit on different
  NUMA nodes: a warning, their transfers cross the CPUs' interconnect, unless
  ``nvidia-smi topo -m`` says NVLink joins them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pdtui.fabric.sysfs import ACTIVE_STATES, DOWN_INTERFACES, Fabric
from pdtui.fabric.ucx import NET_DEVICES_ENV, TLS_ENV, Ucx
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
    ucx: Ucx | None = None                        # it moves KV with NIXL through UCX: what its environment tells UCX
    peers_elsewhere: bool = True                  # a server it moves KV with runs on another host (or may)


def fabric_mismatches(server: Server, fabric: Fabric) -> list[Mismatch]:
    """Everything that keeps ``server`` from moving KV over ``fabric``, its host's."""
    if server.ucx is not None:
        return _ucx(server, server.ucx, fabric)
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


# --------------------------------------------------------------------------- NIXL through UCX

def _ucx(server: Server, ucx: Ucx, fabric: Fabric) -> list[Mismatch]:
    """What UCX, as the server's environment narrows it, finds on the host."""
    named = ucx.net_devices
    found = [m for name in named for m in _ucx_device(server, fabric, name, named)]
    if found:
        return found
    ports = _rdma_ports(fabric, named)
    if ucx.rdma_only and not ports:
        return [_only_rdma(server, ucx, fabric)]
    if ports or named or not ucx.allows_rdma or not server.peers_elsewhere:
        return []       # an RDMA port to use, devices the user chose (TCP ones), or no peer beyond this host
    if not fabric.devices:
        return [_finding("warning", server, "RDMA devices", (server.path.backend, "none"), _where(fabric),
                         f"{fabric.host} has no RDMA device (nothing under {fabric.root}/class/infiniband): UCX moves "
                         f"the KV to its peers on other hosts over TCP, which works, slowly")]
    return [_finding("warning", server, "IB port", ("active", fabric.states()), _where(fabric),
                     f"no RDMA port on {fabric.host} is active ({fabric.states()}): UCX moves the KV to its peers on "
                     f"other hosts over TCP, which works, slowly")]


def _rdma_ports(fabric: Fabric, named: tuple[str, ...]) -> list[str]:
    """The host's active RDMA ports UCX may use (``mlx5_0:1``): every one, or those ``UCX_NET_DEVICES`` names."""
    ports = [f"{name}:{port}" for name, device in fabric.devices.items()
             for port, state in sorted(device.ports.items()) if state in ACTIVE_STATES]
    return [port for port in ports if port in named] if named else ports


def _ucx_device(server: Server, fabric: Fabric, name: str, named: tuple[str, ...]) -> list[Mismatch]:
    """One device ``UCX_NET_DEVICES`` names, against the host: missing or down, refused; on another NUMA node than
    the server's GPUs, a warning."""
    device, colon, port = name.rpartition(":")
    if colon and port.isdigit():
        rdma = fabric.devices.get(device)
        if rdma is None or int(port) not in rdma.ports:
            return [_missing(server, fabric, name, named, _where(fabric))]
        state = rdma.ports[int(port)]
        if state not in ACTIVE_STATES:
            return [_finding("error", server, "UCX_NET_DEVICES", (name, state), _where(fabric),
                             f"{NET_DEVICES_ENV} names {name}, whose port is not active on {fabric.host} ({state}): "
                             f"UCX cannot use it")]
        # (within a host UCX copies GPU to GPU, cuda_ipc, unless UCX_TLS leaves it out: no NIC in the way)
        through_nic = server.peers_elsewhere or (server.ucx is not None and not server.ucx.gpu_ipc)
        return _numa(server, fabric, device, rdma.numa) if through_nic else []
    if name in fabric.devices:
        ports = ", ".join(f"{name}:{n}" for n in sorted(fabric.devices[name].ports)) or f"{name}:1"
        return [_finding("error", server, "UCX_NET_DEVICES", (name, ports), _where(fabric),
                         f"{NET_DEVICES_ENV} names {name} without its port: UCX names an RDMA device's ports "
                         f"({ports}) and matches none of them, so it does not use {name}")]
    interfaces = fabric.interfaces
    if interfaces is None:
        return []           # the host's interfaces were not read: not told
    where = f"{fabric.root}/class/net on {fabric.host}"
    if name not in interfaces:
        return [_missing(server, fabric, name, named, where)]
    if interfaces[name] in DOWN_INTERFACES:
        return [_finding("error", server, "UCX_NET_DEVICES", (name, interfaces[name]), where,
                         f"{NET_DEVICES_ENV} names {name}, which is {interfaces[name]} on {fabric.host}: UCX cannot "
                         f"use it")]
    return []


def _missing(server: Server, fabric: Fabric, name: str, named: tuple[str, ...], where: str) -> Mismatch:
    left = [other for other in named if other != name and _usable(fabric, other)]
    after = f"goes on with {', '.join(left)} only" if left else "is left with none of the devices it was given"
    return _finding("error", server, "UCX_NET_DEVICES", (name, fabric.ucx_names()), where,
                    f"{NET_DEVICES_ENV} names {name}, which {fabric.host} does not have (it has "
                    f"{fabric.ucx_names()}): UCX only warns ('network device ... is not available') and {after}")


def _usable(fabric: Fabric, name: str) -> bool:
    """Whether UCX finds a device it is given on the host, up."""
    device, colon, port = name.rpartition(":")
    if colon and port.isdigit():
        return device in fabric.devices and fabric.devices[device].ports.get(int(port)) in ACTIVE_STATES
    interfaces = fabric.interfaces or {}
    return name in interfaces and interfaces[name] not in DOWN_INTERFACES


def _only_rdma(server: Server, ucx: Ucx, fabric: Fabric) -> Mismatch:
    if not fabric.devices:
        lack = f"{fabric.host} has no RDMA device (nothing under {fabric.root}/class/infiniband)"
    elif not fabric.active:
        lack = f"no RDMA port on {fabric.host} is active ({fabric.states()})"
    else:
        lack = (f"{NET_DEVICES_ENV}={','.join(ucx.net_devices)} names none of the active RDMA ports of {fabric.host} "
                f"({', '.join(_rdma_ports(fabric, ()))})")
    return _finding("error", server, "UCX_TLS", (ucx.tls or "", "no active RDMA port"), _where(fabric),
                    f"{TLS_ENV}={ucx.tls} allows only RDMA transports and {lack}: UCX has no transport to move the "
                    f"KV by, and NIXL fails to connect")


# --------------------------------------------------------------------------- a pair on one host

def pair_numa_mismatches(prefill: Server, decode: Server, links: Mapping[tuple[int, int], str] | None) -> list[Mismatch]:
    """A prefill and a decode of one pair, both on one host and moving KV with NIXL, whose GPUs sit on different NUMA
    nodes: a warning that their transfers cross the CPUs' interconnect, unless ``links`` (``nvidia-smi topo -m``
    between two GPUs: ``NV18``, ``SYS``...; None when it was not read) says NVLink joins them."""
    if not numa_apart(prefill, decode):
        return []
    pn, dn = _nodes(prefill), _nodes(decode)
    cross = [(p, d) for p in sorted(prefill.gpu_numa) for d in sorted(decode.gpu_numa)]
    read = links is not None and all(pair in links for pair in cross)
    if read and links is not None:
        smp = [pair for pair in cross if links[pair] == "SYS"]
        if not smp:
            return []       # NVLink (NV#), or PCIe within a node: the CPUs' interconnect is not crossed
        (a, b) = smp[0]
        why = (f"nvidia-smi topo -m says SYS between GPU {a} and GPU {b}: every transfer crosses the CPUs' "
               f"interconnect" if len(smp) == len(cross) else
               f"nvidia-smi topo -m says SYS between GPU {a} and GPU {b} ({len(smp)} of their {len(cross)} GPU "
               f"pairs): those transfers cross the CPUs' interconnect")
    else:
        why = ("every transfer crosses the CPUs' interconnect unless NVLink joins their GPUs (nvidia-smi topo -m did "
               "not say)")
    p, d = prefill.name, decode.name
    pg, dg = _ranges(prefill.gpu_numa), _ranges(decode.gpu_numa)
    pnodes, dnodes = ", ".join(map(str, sorted(pn))), ", ".join(map(str, sorted(dn)))
    return [Mismatch("warning", "fabric", (d, p), "GPU NUMA nodes", (f"node {pnodes}", f"node {dnodes}"),
                     (prefill.source, decode.source),
                     f"{p} and {d} move KV over NIXL on {prefill.host} from GPUs {pg} (NUMA node {pnodes}) to GPUs "
                     f"{dg} (node {dnodes}): {why}")]


def numa_apart(prefill: Server, decode: Server) -> bool:
    """Whether no GPU of the one shares a NUMA node with a GPU of the other (every node known)."""
    pn, dn = _nodes(prefill), _nodes(decode)
    return bool(pn and dn and not pn & dn)


def _nodes(server: Server) -> set[int]:
    """Its GPUs' NUMA nodes, when every one is known."""
    nodes = set(server.gpu_numa.values())
    return set() if None in nodes else {n for n in nodes if n is not None}


def _ranges(indexes: Iterable[int]) -> str:
    """GPU indexes as people write them, ``0-3`` (gpus/nvidia_smi.py's gpu_ranges: gpus/ sits above fabric/)."""
    runs: list[list[int]] = []
    for index in sorted(set(indexes)):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs)
