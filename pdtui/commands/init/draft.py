"""From a machine's survey to the services of a first config: which unit, GPUs, NUMA node and port each gets.

Pure decisions, written down by :mod:`pdtui.commands.init.draft_yaml`. What an installed unit
says wins over a default, so ``pdtui check --probe`` finds no drift in a config
made from it: its GPUs, NUMA binding and ports are taken as they are. The rest
follows the reference split: prefill on the first NUMA node's GPUs, decode on
the second's (one node: the first half and the second half), default unit
names and ports where no unit was found. The result always validates: a port
or GPU two services would share goes to the one listed first, and the other is
given a free one with a note saying why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pdtui.commands.init.survey import FoundUnit, Survey
from pdtui.gpus.inventory import Inventory
from pdtui.gpus.nvidia_smi import gpu_ranges
from pdtui.targets.systemd.settings import COMMANDS

SERVICES = ("prefill", "decode", "router")      # each is its role, too
BACKENDS = ("prefill", "decode")
DEFAULT_UNITS = {"prefill": "sglang-prefill", "decode": "sglang-decode", "router": "sglang-router"}
DEFAULT_PORTS = {"prefill": 30000, "decode": 30002, "router": 30001}
PLACEHOLDER_GPUS = {"prefill": (0, 1, 2, 3), "decode": (4, 5, 6, 7)}
DEFAULT_COMMANDS: dict[str, tuple[str, ...]] = {name: (name,) for name in COMMANDS}   # each tool as itself


@dataclass(frozen=True, slots=True)
class GpuSplit:
    """The GPUs each backend gets from the inventory alone, and in words how they were split."""

    gpus: Mapping[str, tuple[int, ...]]
    numa: Mapping[str, int | None]
    summary: tuple[str, ...]         # sentences for the config's comment: what nvidia-smi reported, how it was split
    placeholder: bool = False        # no inventory: example GPUs to edit


class Placement(NamedTuple):
    """A backend's GPUs, their NUMA node, and whether its unit said them (else the split did)."""

    gpus: tuple[int, ...]
    numa: int | None
    from_unit: bool = False


@dataclass(frozen=True, slots=True)
class ServiceDraft:
    """One service of the config to write."""

    role: str
    unit: str                        # without .service
    found: FoundUnit | None
    port: int
    gpus: tuple[int, ...] = ()
    numa: int | None = None
    bootstrap_port: int | None = None
    notes: tuple[str, ...] = ()      # sentences for the comment above the service


@dataclass(frozen=True, slots=True)
class Draft:
    """The whole config to write."""

    name: str
    host: str
    commands: Mapping[str, tuple[str, ...]]   # the host's wrappers that differ from the tools themselves
    gpu_summary: tuple[str, ...]
    services: tuple[ServiceDraft, ...]
    replaces: tuple[str, ...] = ()            # SGLang servers of no PD role: candidates for prefill's replaces:
    others: tuple[FoundUnit, ...] = ()        # SGLang units found and not used
    systemctl_error: str | None = None
    placeholder_gpus: bool = False


def make_draft(survey: Survey, host: str, commands: Mapping[str, Sequence[str]] | None = None) -> Draft:
    """The config for ``host`` as ``survey`` found it; ``commands`` are the wrappers it was reached with."""
    chosen, others = choose_units(survey.units)
    split = split_gpus(survey.inventory)
    notes: dict[str, list[str]] = {role: [] for role in SERVICES}
    placements = _unshared_gpus(_backends(chosen, split, survey.inventory), split, notes)
    ports = _ports(chosen, notes)
    drafts = tuple(_service(role, chosen.get(role), ports[role], placements.get(role), notes[role])
                   for role in SERVICES)
    replaces = tuple(u.name.removesuffix(".service") for u in others if u.role is None and u.server)
    wrappers = {tool: tuple(argv) for tool, argv in (commands or {}).items() if tuple(argv) != DEFAULT_COMMANDS.get(tool)}
    return Draft(f"{host}-pd", host, wrappers, split.summary, drafts, replaces,
                 tuple(u for u in others if u.name.removesuffix(".service") not in replaces),
                 survey.systemctl_error, split.placeholder)


# --------------------------------------------------------------------------- units

def choose_units(units: Sequence[FoundUnit]) -> tuple[dict[str, FoundUnit], list[FoundUnit]]:
    """The unit each role gets (the best candidate) and every SGLang unit left over.

    Best: its command line tells the role (not only its name), then it runs now,
    then name order.
    """
    chosen: dict[str, FoundUnit] = {}
    for unit in sorted(units, key=_preference):
        if unit.role is not None and unit.role not in chosen:
            chosen[unit.role] = unit
    used = {unit.name for unit in chosen.values()}
    return chosen, [unit for unit in units if unit.name not in used]


def _preference(unit: FoundUnit) -> tuple[bool, bool, str]:
    return unit.why.startswith("its name"), unit.active != "active", unit.name


# --------------------------------------------------------------------------- GPUs

def split_gpus(inv: Inventory | None) -> GpuSplit:
    """Prefill on the first NUMA node's GPUs, decode on the second's; one node (or nodes unknown): halves."""
    if inv is None or not inv.gpus:
        return GpuSplit(PLACEHOLDER_GPUS, {"prefill": None, "decode": None},
                        ("nvidia-smi was not found (or lists no GPU): the GPUs below are an example of an "
                         "8-GPU machine; set each service's `gpus:` (and `numa:`) to the GPUs it should use.",), True)
    indexes = sorted(gpu.index for gpu in inv.gpus)
    nodes = {index: inv.numa.get(index) for index in indexes}
    known = sorted({node for node in nodes.values() if node is not None})
    summary = [_reported(inv, indexes, nodes)]
    if len(known) >= 2 and None not in nodes.values():
        first, second = known[0], known[1]
        gpus = {"prefill": tuple(i for i in indexes if nodes[i] == first),
                "decode": tuple(i for i in indexes if nodes[i] == second)}
        summary.append(f"Prefill takes NUMA node {first}'s GPUs, decode NUMA node {second}'s: each server's "
                       "GPUs share a node with the CPUs and memory bound to it.")
        if len(known) > 2:
            summary.append(f"The GPUs of NUMA nodes {', '.join(map(str, known[2:]))} are left out: add them to a "
                           "backend's `gpus:` if it should use them.")
        return GpuSplit(gpus, {"prefill": first, "decode": second}, tuple(summary))
    half = (len(indexes) + 1) // 2
    gpus = {"prefill": tuple(indexes[:half]), "decode": tuple(indexes[half:])}
    node = known[0] if len(known) == 1 and None not in nodes.values() else None
    summary.append("Prefill takes the first half, decode the second half"
                   + (" (one NUMA node)." if node is not None else " (their NUMA nodes are unknown)."))
    return GpuSplit(gpus, {role: node if gpus[role] else None for role in BACKENDS}, tuple(summary))


def _reported(inv: Inventory, indexes: list[int], nodes: Mapping[int, int | None]) -> str:
    """``nvidia-smi reports 8 GPUs (NVIDIA H100 80GB HBM3): 0-3 on NUMA node 0, 4-7 on NUMA node 1.``"""
    models = sorted({gpu.name for gpu in inv.gpus if gpu.name})
    count = f"{len(indexes)} GPU{'s' if len(indexes) != 1 else ''}" + (f" ({', '.join(models)})" if models else "")
    by_node: dict[int | None, list[int]] = {}
    for index in indexes:
        by_node.setdefault(nodes[index], []).append(index)
    where = ", ".join(f"{gpu_ranges(gpus)} on NUMA node {node}" if node is not None else f"{gpu_ranges(gpus)} on an "
                      "unknown NUMA node" for node, gpus in sorted(by_node.items(), key=lambda item: min(item[1])))
    return f"nvidia-smi reports {count}: {where}."


def _backends(chosen: Mapping[str, FoundUnit], split: GpuSplit, inv: Inventory | None) -> dict[str, Placement]:
    """Each backend's placement: what its unit says, else the split's."""
    found: dict[str, Placement] = {}
    for role in BACKENDS:
        unit = chosen.get(role)
        if unit is not None and unit.gpus:
            found[role] = Placement(unit.gpus, unit.numa if unit.numa is not None else _node_of(inv, unit.gpus), True)
        else:
            found[role] = _split(split, role)
    return found


def _split(split: GpuSplit, role: str) -> Placement:
    return Placement(tuple(split.gpus[role]), split.numa[role])


def _gpus(indexes: Sequence[int] | set[int]) -> str:
    """``GPU 3``, ``GPUs 0-3``."""
    return f"GPU{'s' if len(indexes) > 1 else ''} {gpu_ranges(indexes)}"


def _node_of(inv: Inventory | None, gpus: Sequence[int]) -> int | None:
    """The NUMA node all of ``gpus`` are on, if the inventory knows it."""
    nodes = {inv.numa.get(gpu) for gpu in gpus} if inv is not None else {None}
    return nodes.pop() if len(nodes) == 1 else None


def _unshared_gpus(backends: dict[str, Placement], split: GpuSplit,
                   notes: dict[str, list[str]]) -> dict[str, Placement]:
    """No GPU for two backends: the split's GPUs give way to a unit's; two units that overlap both take the split."""
    prefill, decode = backends["prefill"], backends["decode"]
    shared = set(prefill.gpus) & set(decode.gpus)
    if not shared:
        return backends
    if prefill.from_unit and decode.from_unit:
        for role in BACKENDS:
            notes[role].append(f"Its unit runs on {_gpus(backends[role].gpus)}, which overlap the other "
                               "backend's: the usual split is written instead (`pdtui check --probe` shows the drift).")
        return {role: _split(split, role) for role in BACKENDS}
    yielding = "decode" if prefill.from_unit else "prefill"
    left = tuple(gpu for gpu in backends[yielding].gpus if gpu not in shared)
    notes[yielding].append(f"{_gpus(shared)} {'is' if len(shared) == 1 else 'are'} the other backend's (its unit says "
                           "so): " + (f"this one keeps {_gpus(left)}." if left else "no GPU is left for this one; set `gpus:`."))
    return {**backends, yielding: Placement(left, backends[yielding].numa if left else None)}


# --------------------------------------------------------------------------- ports

def _ports(chosen: Mapping[str, FoundUnit], notes: dict[str, list[str]]) -> dict[str, int]:
    """Each role's port: its unit's --port, else the default; one taken already moves to the next free one.

    The ports units say are placed first: a unit really listens there, a default is only a suggestion.
    """
    taken: set[int] = set()
    if (boot := _bootstrap(chosen)) is not None:
        taken.add(boot)
    said = {role: unit.port for role, unit in chosen.items() if unit.port is not None}
    ports: dict[str, int] = {}
    for role in sorted(SERVICES, key=lambda role: role not in said):
        wanted = said.get(role, DEFAULT_PORTS[role])
        port = wanted
        while port in taken:
            port += 1
        if port != wanted:
            notes[role].append(f"Port {wanted} is another service's here, so this one says {port}"
                               + (" (its unit's --port differs: `pdtui check --probe` shows it)." if role in said else "."))
        taken.add(port)
        ports[role] = port
    return ports


def _bootstrap(chosen: Mapping[str, FoundUnit]) -> int | None:
    unit = chosen.get("prefill")
    return unit.bootstrap_port if unit is not None else None


def _service(role: str, unit: FoundUnit | None, port: int, placement: Placement | None,
             notes: list[str]) -> ServiceDraft:
    name = unit.name.removesuffix(".service") if unit else DEFAULT_UNITS[role]
    gpus, numa, _ = placement or Placement((), None)
    if role in BACKENDS and not gpus and not notes:
        notes = [*notes, "No GPU is left for it on this machine: set `gpus:` to the GPUs it should use."]
    bootstrap = unit.bootstrap_port if unit is not None and role == "prefill" else None
    return ServiceDraft(role, name, unit, port, gpus, numa, bootstrap, tuple(notes))
