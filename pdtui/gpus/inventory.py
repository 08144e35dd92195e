"""GPUs of the deployment's hosts: each host's inventory, and the preflight's findings on the GPU split.

A wrong GPU split (a service across two NUMA nodes, or on the other node than
its CPUs) silently costs throughput, and GPUs still held by an old server make a
bring-up die of OOM minutes later: :func:`preflight_findings` catches both
before anything is started, from one :func:`inventory` per host.

A host without nvidia-smi (or with a broken driver) has no inventory: that is
told as a finding, never raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pdtui.config import BACKEND_ROLES
from pdtui.fabric.sysfs import Fabric, parse_fabric
from pdtui.gpus.nvidia_smi import (
    ComputeApp,
    Gpu,
    compute_apps_argv,
    gpu_ranges,
    inventory_argv,
    inventory_mark,
    parse_compute_apps,
    parse_inventory,
    parse_query_gpu,
    parse_topo,
    query_gpu_argv,
    sysfs_bus_id,
    topo_argv,
)
from pdtui.hosts.base import Host, HostError
from pdtui.support.text import inert

COMMAND_TIMEOUT = 20.0
BUSY_MIB = 1024
PROCESS_NAME_CHARS = 60

Level = Literal["error", "warning", "info"]


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as the faces show it (in a :class:`~pdtui.gpus.sampler.GpuSample` and a node's panel): made here,
    below the engine that tells it, so this package imports no engine."""

    index: int
    name: str = ""
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    utilization: int | None = None
    numa: int | None = None


@dataclass(frozen=True, slots=True)
class Inventory:
    """What one host has: its GPUs, the processes holding them and each GPU's NUMA node, and its process table
    (``ps -e -o pid=,ppid=``; None when it could not be read), which tells a unit's own processes."""

    host: str
    gpus: tuple[Gpu, ...]
    apps: tuple[ComputeApp, ...] = ()
    numa: Mapping[int, int | None] = field(default_factory=dict)
    processes: str | None = None

    def gpu(self, index: int) -> Gpu | None:
        return next((gpu for gpu in self.gpus if gpu.index == index), None)

    def apps_on(self, index: int) -> list[ComputeApp]:
        gpu = self.gpu(index)
        return [app for app in self.apps if gpu is not None and app.gpu_uuid == gpu.uuid]

    def info(self, gpu: Gpu) -> GpuInfo:
        """``gpu`` as the UI shows it: its numbers, its name and NUMA node from this inventory."""
        known = self.gpu(gpu.index)
        return GpuInfo(gpu.index, gpu.name or (known.name if known else ""), gpu.memory_used_mib,
                       gpu.memory_total_mib, gpu.utilization, self.numa.get(gpu.index))


@dataclass(frozen=True, slots=True)
class Finding:
    """One preflight result, one line for the user. ``service`` is None for a host-wide one."""

    level: Level
    service: str | None
    text: str


# --------------------------------------------------------------------------- inventory

async def inventory(host: Host, nvidia_smi: Sequence[str], *, sysfs: str = "/sys",
                    timeout: float = COMMAND_TIMEOUT) -> Inventory | None:
    """Query ``host``'s GPUs; None when nvidia-smi is missing, fails or lists no GPU (:func:`hardware`)."""
    return (await hardware(host, nvidia_smi, sysfs=sysfs, timeout=timeout))[0]


async def hardware(host: Host, nvidia_smi: Sequence[str], *, sysfs: str = "/sys",
                   timeout: float = COMMAND_TIMEOUT) -> tuple[Inventory | None, Fabric | None]:
    """``host``'s GPU inventory and its RDMA fabric, read in one remote command.

    It asks nvidia-smi for the GPUs and the processes holding them, lists the
    host's processes and reads, under ``sysfs``, every PCI device's NUMA node
    and the fabric; GPUs whose node it leaves unknown (no such file, ``-1``)
    are looked up in ``nvidia-smi topo -m``. The inventory is None when
    nvidia-smi is missing, fails or lists no GPU; the fabric when the tree
    cannot be read.
    """
    mark = inventory_mark()
    found = parse_inventory(await _stdout(host, inventory_argv(nvidia_smi, sysfs, mark), timeout) or "", mark)
    fabric = parse_fabric(host.name, sysfs, found.rest)
    gpus = parse_query_gpu(found.gpus or "")
    if not gpus:
        return None, fabric
    numa = {gpu.index: found.numa.get(sysfs_bus_id(gpu.bus_id) or "") for gpu in gpus}
    if None in numa.values():
        topo = parse_topo(await _stdout(host, topo_argv(nvidia_smi), timeout) or "")
        numa = {index: node if node is not None else topo.get(index) for index, node in numa.items()}
    apps = tuple(parse_compute_apps(found.apps or ""))
    return Inventory(host.name, tuple(gpus), apps, numa, found.processes), fabric


async def gpu_holders(host: Host, nvidia_smi: Sequence[str], gpus: Iterable[int], *,
                      timeout: float = COMMAND_TIMEOUT) -> list[str] | None:
    """What still holds memory on ``gpus`` (``GPU 4 70000 MiB used by PID 4242 python3``); None when
    nvidia-smi cannot tell. A GPU counts as held while a process is listed on it or its memory is in use."""
    listing, apps_text = await asyncio.gather(_stdout(host, query_gpu_argv(nvidia_smi), timeout),
                                              _stdout(host, compute_apps_argv(nvidia_smi), timeout))
    if not (listed := parse_query_gpu(listing or "")) or apps_text is None:
        return None
    found = Inventory(host.name, tuple(listed), tuple(parse_compute_apps(apps_text)))
    held = []
    for index in gpus:
        gpu = found.gpu(index)
        if (holder := _held(index, gpu.memory_used_mib if gpu else None, found.apps_on(index), BUSY_MIB)) is not None:
            held.append(holder)
    return held


def gpu_hosts(deployment) -> list[str]:
    """Hosts with a service that names GPUs: the ones worth an inventory."""
    return list(dict.fromkeys(svc.host for svc in deployment.services.values() if svc.gpus))


async def host_hardware(deployment, hosts: Mapping[str, Host]) -> dict[str, tuple[Inventory | None, Fabric | None]]:
    """The inventory and fabric of each host of ``hosts`` that has a GPU service, all read at once."""
    names = [name for name in gpu_hosts(deployment) if name in hosts]
    found = await asyncio.gather(*(hardware(hosts[name], deployment.hosts[name].commands["nvidia-smi"],
                                            sysfs=deployment.hosts[name].sysfs) for name in names))
    return dict(zip(names, found, strict=False))


async def _stdout(host: Host, argv: list[str], timeout: float) -> str | None:
    """The output of a command that succeeded; None if it could not run or failed."""
    try:
        result = await host.run(argv, timeout=timeout, read_only=True)
    except HostError:
        return None
    return result.stdout if result.ok else None


def process_tree(ps_output: str, root: int) -> frozenset[int]:
    """``root`` and every process below it, from ``ps -e -o pid=,ppid=``: a service's main process and its
    workers (SGLang's schedulers, which hold the GPUs, are its children)."""
    children: dict[int, list[int]] = {}
    for line in ps_output.splitlines():
        cells = line.split()
        if len(cells) == 2 and cells[0].isdigit() and cells[1].isdigit():
            children.setdefault(int(cells[1]), []).append(int(cells[0]))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return frozenset(found)


# --------------------------------------------------------------------------- preflight

def preflight_findings(deployment, inventories: Mapping[str, Inventory | None], *,
                       busy_mib: int = BUSY_MIB, own: Mapping[str, frozenset[int]] | None = None) -> list[Finding]:
    """Everything wrong with the deployment's GPU assignment, as the user should read it.

    Hosts missing from ``inventories`` were not asked and are not judged. NUMA
    and busy-GPU findings are warnings, errors with ``strict: true``. ``own``:
    the processes of each service's unit when it runs already; what they hold
    is the service's own, not a busy GPU.
    """
    own = own or {}
    soft: Level = "error" if deployment.strict else "warning"
    findings = [Finding("warning", None, f"GPU info unavailable on {host}: nvidia-smi missing or failing, "
                                         "GPU and NUMA checks skipped")
                for host, inv in inventories.items() if inv is None]
    findings += _shared_gpus(deployment)
    for name, svc in deployment.services.items():
        inv = inventories.get(svc.host)
        if not svc.gpus or inv is None:
            continue
        present = [gpu for index in svc.gpus if (gpu := inv.gpu(index)) is not None]
        findings += _missing(name, svc, inv, present)
        findings += _numa(name, svc, inv, present, soft)
        findings += _busy(name, svc, inv, present, soft, busy_mib, own.get(name))
    return findings


def _missing(name: str, svc, inv: Inventory, present: list[Gpu]) -> list[Finding]:
    missing = sorted(set(svc.gpus) - {gpu.index for gpu in present})
    if not missing:
        return []
    verb = "does" if len(missing) == 1 else "do"
    have = _gpus([gpu.index for gpu in inv.gpus])
    return [Finding("error", name, f"{name}: {_gpus(missing)} {verb} not exist on {svc.host} (it has {have})")]


def _shared_gpus(deployment) -> list[Finding]:
    """Two backends on one GPU (the config refuses this too; checked again as the last line of defence)."""
    owners: dict[tuple[str, int], str] = {}
    findings = []
    for name, svc in deployment.services.items():
        if svc.role not in BACKEND_ROLES:
            continue
        shared: dict[str, list[int]] = {}
        for gpu in svc.gpus:
            owner = owners.setdefault((svc.host, gpu), name)
            if owner != name:
                shared.setdefault(owner, []).append(gpu)
        findings += [Finding("error", name, f"{owner} and {name} share {_gpus(gpus)} on {svc.host}: "
                                            "each GPU may serve one backend")
                     for owner, gpus in shared.items()]
    return findings


def _numa(name: str, svc, inv: Inventory, present: list[Gpu], level: Level) -> list[Finding]:
    placement: dict[int, list[int]] = {}
    for gpu in present:
        node = inv.numa.get(gpu.index)
        if node is not None:
            placement.setdefault(node, []).append(gpu.index)
    if not placement and svc.numa is not None and present:
        indexes = [gpu.index for gpu in present]
        return [Finding("info", name, f"{name}: NUMA node of {_gpus(indexes)} unknown on {svc.host}, "
                                      f"numa: {svc.numa} not checked")]
    if svc.numa is not None and set(placement) - {svc.numa}:
        if len(placement) == 1:
            (node, gpus), = placement.items()
            text = f"{name}: {_gpus(gpus)} {_be(gpus)} on NUMA {node}, not NUMA {svc.numa} as configured"
        else:
            text = f"{name}: GPUs are spread over {_nodes(placement)}, not all on NUMA {svc.numa} as configured"
        return [Finding(level, name, text)]
    if len(placement) > 1:
        return [Finding(level, name, f"{name}: GPUs are spread over {_nodes(placement)}: "
                                     "cross-node traffic costs throughput")]
    return []


def _busy(name: str, svc, inv: Inventory, present: list[Gpu], level: Level, busy_mib: int,
          own: frozenset[int] | None) -> list[Finding]:
    busy = []
    for gpu in present:
        used, apps = gpu.memory_used_mib, inv.apps_on(gpu.index)
        if own is not None:     # the unit runs: memory no other process is listed for is taken to be its own
            apps = [app for app in apps if app.pid not in own]
            used = None if not apps else used
        if (held := _held(gpu.index, used, apps, busy_mib)) is not None:
            busy.append(held)
    if not busy:
        return []
    count = "a GPU" if len(busy) == 1 else f"{len(busy)} GPUs"
    return [Finding(level, name, f"{name}: {count} on {svc.host} already in use: {'; '.join(busy)}")]


def _held(index: int, used: int | None, apps: list[ComputeApp], busy_mib: int) -> str | None:
    """What holds GPU ``index`` (a process listed on it, or more memory used than ``busy_mib``), or None."""
    return _holder(index, used, apps) if apps or (used is not None and used > busy_mib) else None


def _holder(index: int, used: int | None, apps: list[ComputeApp]) -> str:
    """``GPU 2 70000 MiB used by PID 4242 python3``: what holds one GPU."""
    words = [f"GPU {index}"]
    if used is not None:
        words.append(f"{used} MiB used")
    if apps:
        words.append("by" if used is not None else "held by")
        words.append(", ".join(f"PID {app.pid} {inert(app.process_name, PROCESS_NAME_CHARS)}".rstrip()
                               for app in apps))
    return " ".join(words)


def _be(items: Sequence[object]) -> str:
    return "is" if len(items) == 1 else "are"


def _gpus(indexes: Iterable[int]) -> str:
    """``GPU 3``, ``GPUs 0-3``, ``GPUs 0-2, 5``."""
    ordered = sorted(set(indexes))
    return f"GPU{'s' if len(ordered) > 1 else ''} {gpu_ranges(ordered)}"


def _nodes(placement: Mapping[int, list[int]]) -> str:
    """``NUMA 0 (GPUs 2, 3) and NUMA 1 (GPUs 4, 5)``."""
    parts = [f"NUMA {node} ({_gpus(gpus)})" for node, gpus in sorted(placement.items())]
    return ", ".join(parts[:-1]) + " and " + parts[-1]
