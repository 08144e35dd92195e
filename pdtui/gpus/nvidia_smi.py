"""nvidia-smi and sysfs: argv builders and tolerant parsers of what they print.

Everything here is pure: text in, values out. The output comes from remote
machines and from many driver versions, so a parser never raises: a value it
cannot read (``N/A``, ``[N/A]``, ``[Not Supported]``, a missing trailing column)
becomes None, and a line it cannot read at all (a header, a warning, junk) is
skipped.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pdtui.fabric.sysfs import READ as FABRIC_READ

QUERY_GPU_FIELDS = ("index", "uuid", "name", "pci.bus_id", "memory.used", "memory.total", "utilization.gpu")
SAMPLE_FIELDS = ("index", "memory.used", "memory.total", "utilization.gpu")
COMPUTE_APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
CSV_FORMAT = "--format=csv,noheader,nounits"
SAMPLE_INTERVAL_MS = 2000
PS_ARGV = ("ps", "-e", "-o", "pid=,ppid=")    # every process and its parent: what descends from a unit's main PID
MARK = "@@pdtui"          # closes each part of the inventory command's output, with the part's exit status

_NUMBER = re.compile(r"(-?\d+)(?:\.\d+)?(?:\s*(?:MiB|%))?")
_BUS_ID = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CELL_SPLIT = re.compile(r"\t| {2,}")
_GPU_LABEL = re.compile(r"GPU(\d+)")

# Attribute of Gpu each query field fills, and whether it is a number.
_GPU_ATTRS: dict[str, tuple[str, bool]] = {
    "index": ("index", True),
    "uuid": ("uuid", False),
    "name": ("name", False),
    "gpu_name": ("name", False),
    "pci.bus_id": ("bus_id", False),
    "gpu_bus_id": ("bus_id", False),
    "memory.used": ("memory_used_mib", True),
    "memory.total": ("memory_total_mib", True),
    "utilization.gpu": ("utilization", True),
}


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as ``--query-gpu`` reports it; None where nvidia-smi had no value."""

    index: int
    uuid: str = ""
    name: str = ""
    bus_id: str = ""                   # as nvidia-smi prints it: 00000000:18:00.0
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    utilization: int | None = None


@dataclass(frozen=True, slots=True)
class ComputeApp:
    """A process holding a GPU, as ``--query-compute-apps`` reports it."""

    gpu_uuid: str
    pid: int
    process_name: str = ""
    used_memory_mib: int | None = None


# --------------------------------------------------------------------------- argv builders

def query_gpu_argv(nvidia_smi: Sequence[str]) -> list[str]:
    """The inventory query; ``nvidia_smi`` is the host's ``commands["nvidia-smi"]`` prefix."""
    return [*nvidia_smi, "--query-gpu=" + ",".join(QUERY_GPU_FIELDS), CSV_FORMAT]


def compute_apps_argv(nvidia_smi: Sequence[str]) -> list[str]:
    return [*nvidia_smi, "--query-compute-apps=" + ",".join(COMPUTE_APP_FIELDS), CSV_FORMAT]


def topo_argv(nvidia_smi: Sequence[str]) -> list[str]:
    return [*nvidia_smi, "topo", "-m"]


def sampler_argv(nvidia_smi: Sequence[str], interval_ms: int = SAMPLE_INTERVAL_MS) -> list[str]:
    """One long-running process printing every GPU's memory and utilization each ``interval_ms``."""
    return [*nvidia_smi, "--query-gpu=" + ",".join(SAMPLE_FIELDS), CSV_FORMAT, "-lms", str(interval_ms)]


def inventory_mark() -> str:
    """A mark no output can forge: a process of another user named ``x\\n@@pdtui 0\\n…`` (a path may hold a
    newline; nvidia-smi lists GPU processes by it) would otherwise end a part early and write the parts after it."""
    return f"{MARK}-{secrets.token_hex(8)}"


def inventory_argv(nvidia_smi: Sequence[str], sysfs: str, mark: str = MARK) -> list[str]:
    """One remote command for a host's whole inventory: its GPUs, the processes holding them and the process table,
    each part closed by ``mark`` and its exit status (:func:`parse_inventory`), then, under ``sysfs``, every PCI
    device's NUMA node (the GPUs' among them) and the RDMA fabric (fabric/sysfs.py reads it from the same output)."""
    script = (f"{shlex.join(query_gpu_argv(nvidia_smi))} 2>/dev/null; echo \"$2 $?\"\n"
              f"{shlex.join(compute_apps_argv(nvidia_smi))} 2>/dev/null; echo \"$2 $?\"\n"
              f"{shlex.join(PS_ARGV)} 2>/dev/null; echo \"$2 $?\"\n"
              f'cd -- "$1" 2>/dev/null || exit 0\n{FABRIC_READ}\n'
              'grep -H . bus/pci/devices/*/numa_node 2>/dev/null\nexit 0')
    return ["sh", "-c", script, "pdtui-gpus", sysfs, mark]


# --------------------------------------------------------------------------- values

def _text(cell: str) -> str | None:
    """A cell's value; None for the ways nvidia-smi says it has none (N/A, [N/A], [Not Supported] ...)."""
    value = cell.strip()
    if not value or value == "N/A" or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def _int(cell: str) -> int | None:
    """A number, with or without its unit (``81559``, ``81559 MiB``, ``0 %``)."""
    value = _text(cell)
    if value is not None and value.isascii() and value.isdigit():   # a bare count: most cells of a sample
        return int(value)
    match = _NUMBER.fullmatch(value) if value else None
    return int(match[1]) if match else None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split(",")]


# --------------------------------------------------------------------------- parsers

def parse_gpu_line(line: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> Gpu | None:
    """One ``--query-gpu`` CSV line for ``fields`` (which must include index); None if it is not one."""
    values: dict[str, object] = {}
    for field, cell in zip(fields, _cells(line), strict=False):
        attr, numeric = _GPU_ATTRS.get(field, ("", False))
        if attr:
            values[attr] = _int(cell) if numeric else (_text(cell) or "")
    index = values.pop("index", None)
    if not isinstance(index, int) or index < 0:
        return None
    return Gpu(index, **values)   # type: ignore[arg-type]


def parse_query_gpu(text: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> list[Gpu]:
    """Every GPU in ``--query-gpu`` output, in the order printed; headers and junk skipped."""
    return [gpu for line in text.splitlines() if (gpu := parse_gpu_line(line, fields)) is not None]


def parse_compute_apps(text: str) -> list[ComputeApp]:
    """``--query-compute-apps=gpu_uuid,pid,process_name,used_memory`` output.

    A process name may itself contain commas: it is everything between the
    pid and the last column.
    """
    apps: list[ComputeApp] = []
    for line in text.splitlines():
        cells = _cells(line)
        pid = _int(cells[1]) if len(cells) > 1 else None
        uuid = _text(cells[0]) or ""
        if pid is None or pid <= 0 or not uuid:
            continue
        name = ", ".join(cells[2:-1]) if len(cells) > 3 else (cells[2] if len(cells) > 2 else "")
        memory = _int(cells[-1]) if len(cells) > 3 else None
        apps.append(ComputeApp(uuid, pid, _text(name) or "", memory))
    return apps


def sysfs_bus_id(bus_id: str) -> str | None:
    """nvidia-smi's ``00000000:18:00.0`` as sysfs names it, ``0000:18:00.0``; None if it is no bus id.

    The result goes into a path on a command line, so only a well-formed id passes.
    """
    match = _BUS_ID.fullmatch(bus_id.strip())
    if not match:
        return None
    domain, bus, device, function = match.groups()
    if int(domain, 16) > 0xFFFF:
        return None
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def parse_numa_node(text: str) -> int | None:
    """A sysfs ``numa_node`` file: the node, or None for ``-1`` (no NUMA affinity) and junk."""
    value = _int(text)
    return value if value is not None and value >= 0 else None


@dataclass(frozen=True, slots=True)
class InventoryText:
    """What :func:`inventory_argv` printed, in its parts: nvidia-smi's answers and the process table (None where
    one failed), each PCI device's NUMA node by its sysfs name (``0000:18:00.0``) and what came after the parts
    (the fabric's lines: nothing a part printed)."""

    gpus: str | None
    apps: str | None
    processes: str | None
    numa: dict[str, int | None]
    rest: str = ""


PARTS = 3      # the inventory's parts before its NUMA lines: GPUs, compute apps, processes


def parse_inventory(text: str, mark: str = MARK) -> InventoryText:
    parts: list[str | None] = []
    lines: list[str] = []
    rest: list[str] = []
    numa: dict[str, int | None] = {}
    for line in text.splitlines():
        if len(parts) < PARTS and line.startswith(mark + " "):
            parts.append("".join(f"{kept}\n" for kept in lines) if line == f"{mark} 0" else None)
            lines = []
        elif len(parts) < PARTS:
            lines.append(line)
        else:
            rest.append(line)
            if line.startswith("bus/pci/devices/"):
                path, sep, value = line.partition("/numa_node:")
                if sep:
                    numa[path.removeprefix("bus/pci/devices/")] = parse_numa_node(value)
    parts += [None] * (PARTS - len(parts))
    gpus, apps, processes = parts
    return InventoryText(gpus, apps, processes, numa, "".join(f"{line}\n" for line in rest))


def parse_topo(text: str) -> dict[int, int | None]:
    """GPU index -> NUMA node from ``nvidia-smi topo -m``.

    Columns are tab separated (or padded with spaces when copied from a
    terminal); the header names them and ``NUMA Affinity`` is the one wanted.
    Rows may carry an empty cell more than the header (``0\\t\\tN/A``), so
    empty cells are dropped on both sides before lining them up. A GPU whose
    affinity is ``N/A`` or a range of nodes maps to None; without a NUMA
    column (old drivers) every GPU does.
    """
    numa_column: int | None = None
    nodes: dict[int, int | None] = {}
    for raw in _ANSI.sub("", text).splitlines():
        cells = [cell.strip() for cell in _CELL_SPLIT.split(raw) if cell.strip()]
        if not cells:
            continue
        if "CPU Affinity" in cells or "NUMA Affinity" in cells:   # the header
            if "NUMA Affinity" in cells:
                numa_column = cells.index("NUMA Affinity") + 1   # data rows start with their label
            continue
        label = _GPU_LABEL.fullmatch(cells[0])
        if label is None:
            continue
        cell = cells[numa_column] if numa_column is not None and numa_column < len(cells) else ""
        nodes[int(label[1])] = parse_numa_node(cell) if cell.isdigit() else None
    return nodes


def gpu_ranges(indexes: Iterable[int]) -> str:
    """GPU indexes as people write them: ``0-3`` for 0,1,2,3; ``0, 1`` for a pair; ``0-2, 5``."""
    runs: list[list[int]] = []
    for index in sorted(set(indexes)):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs)

