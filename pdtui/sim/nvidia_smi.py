"""``python -m pdtui.sim.nvidia_smi [--root ROOT] ARGS``: nvidia-smi for a sandbox.

An HGX-like box of eight "NVIDIA H100 80GB HBM3", GPUs 0-3 on NUMA 0 and 4-7
on NUMA 1, NVLink between all of them. It answers the forms pdtui uses, as
the real tool prints them: ``--query-gpu=FIELDS`` and
``--query-compute-apps=FIELDS`` with ``--format=csv[,noheader][,nounits]``,
once or in a loop (``-l SEC``, ``-lms MS``; one flushed round per interval,
until SIGTERM or a closed stdout), ``topo -m`` and ``-L``.

What the GPUs hold comes from the sandbox: every running sim worker
(``pdtui.sim.worker --gpus 0,1,2,3``) fills its GPUs as it loads, and
``ROOT/gpus.json`` (written by :func:`set_busy`) injects busy GPUs, e.g. a
server left over from an earlier run. Without a ROOT every GPU is idle. The
machine's own sysfs knows nothing of these GPUs: a host config pointed at the
sim's tree (sim/sysfs.py) reads their NUMA nodes there, else ``topo -m`` tells
them, as on a box whose sysfs is hidden.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pdtui.sim.systemctl import ROOT_ENV
from pdtui.sim.unit_store import UnitStore

MODEL = "NVIDIA H100 80GB HBM3"
TOTAL_MIB = 81559
IDLE_MIB = 1
COUNT = 8
BUS_NUMBERS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
CPU_AFFINITY = ("0-55,112-167", "56-111,168-223")
NICS = 4
STATE_FILE = "gpus.json"
SIM_WORKERS = frozenset({"pdtui.sim.worker", "pdtui.sim.vllm_worker"})     # the stand-ins that fill their GPUs

# A sim worker's footprint: CUDA context at once, weights and KV cache over LOAD_SECONDS.
WORKER_START_MIB = 520
WORKER_LOADED_MIB = 72418
LOAD_SECONDS = 4.0

GPU_FIELDS = {   # query field -> header, unit
    "index": ("index", ""), "uuid": ("uuid", ""), "name": ("name", ""), "gpu_name": ("name", ""),
    "pci.bus_id": ("pci.bus_id", ""), "gpu_bus_id": ("pci.bus_id", ""),
    "memory.used": ("memory.used [MiB]", "MiB"), "memory.total": ("memory.total [MiB]", "MiB"),
    "memory.free": ("memory.free [MiB]", "MiB"), "utilization.gpu": ("utilization.gpu [%]", "%"),
}
APP_FIELDS = {
    "gpu_uuid": ("gpu_uuid", ""), "gpu_bus_id": ("gpu_bus_id", ""), "gpu_name": ("gpu_name", ""),
    "pid": ("pid", ""), "process_name": ("process_name", ""),
    "used_memory": ("used_gpu_memory [MiB]", "MiB"), "used_gpu_memory": ("used_gpu_memory [MiB]", "MiB"),
}
EXIT_USAGE = 2


class Usage(Exception):
    """A command line nvidia-smi would refuse: one line on stderr."""


@dataclass(frozen=True, slots=True)
class App:
    pid: int
    name: str
    used_mib: int


@dataclass(slots=True)
class SimGpu:
    index: int
    used_mib: int = IDLE_MIB
    utilization: int = 0
    apps: list[App] = field(default_factory=list)

    @property
    def numa(self) -> int:
        return 0 if self.index < COUNT // 2 else 1

    @property
    def uuid(self) -> str:
        digest = hashlib.sha256(f"pdtui-sim-gpu-{self.index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    @property
    def bus_id(self) -> str:
        return f"00000000:{BUS_NUMBERS[self.index]}:00.0"

    def value(self, query: str) -> str | int:
        values: dict[str, str | int] = {"index": self.index, "uuid": self.uuid, "name": MODEL, "gpu_name": MODEL,
                "pci.bus_id": self.bus_id, "gpu_bus_id": self.bus_id, "memory.used": self.used_mib,
                "memory.total": TOTAL_MIB, "memory.free": TOTAL_MIB - self.used_mib,
                "utilization.gpu": self.utilization}
        return values[query]


# --------------------------------------------------------------------------- state

def read_state(root: Path) -> dict[str, dict]:
    """Injected GPU state: ``{"gpus": {"2": {"used_mib": .., "utilization": .., "apps": [[pid, name, mib]]}}}``."""
    try:
        data = json.loads((root / STATE_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    gpus = data.get("gpus") if isinstance(data, dict) else None
    return gpus if isinstance(gpus, dict) else {}


def set_busy(root: Path, index: int, used_mib: int, apps: Sequence[tuple[int, str, int]] = (),
             utilization: int = 0) -> None:
    """Make GPU ``index`` of the sandbox at ``root`` show as held (``apps``: pid, process name, MiB)."""
    gpus = read_state(root)
    gpus[str(index)] = {"used_mib": used_mib, "utilization": utilization, "apps": [list(app) for app in apps]}
    path = root / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"gpus": gpus}))
    os.replace(tmp, path)


def load_gpus(root: Path | None, now: float) -> list[SimGpu]:
    """The GPUs as they are at ``now``: idle, plus what gpus.json injects, plus the running sim workers."""
    gpus = [SimGpu(index) for index in range(COUNT)]
    if root is None:
        return gpus
    for key, entry in read_state(root).items():
        if key.isdigit() and int(key) < COUNT and isinstance(entry, dict):
            _inject(gpus[int(key)], entry)
    for pid, name, indexes, age in _workers(root, now):
        used = _worker_mib(age)
        for index in (i for i in indexes if i < COUNT):
            gpu = gpus[index]
            gpu.used_mib = min(TOTAL_MIB, gpu.used_mib + used)
            gpu.utilization = max(gpu.utilization, _busy_utilization(index, age))
            gpu.apps.append(App(pid, name, used))
    return gpus


def _inject(gpu: SimGpu, entry: dict) -> None:
    """Apply one gpus.json entry; a malformed one leaves the GPU idle rather than failing the query."""
    try:
        apps = [App(int(pid), str(name), int(mib)) for pid, name, mib in entry.get("apps", [])]
        gpu.used_mib, gpu.utilization = int(entry.get("used_mib", IDLE_MIB)), int(entry.get("utilization", 0))
    except (TypeError, ValueError):
        return
    gpu.apps = apps


def _worker_mib(age: float) -> int:
    """A worker's memory on each of its GPUs ``age`` seconds after it started."""
    loading = (WORKER_LOADED_MIB - WORKER_START_MIB) * age / LOAD_SECONDS
    return min(WORKER_LOADED_MIB, WORKER_START_MIB + int(loading))


def _busy_utilization(index: int, age: float) -> int:
    """Idle while loading, then a steady hum that differs per GPU and moves with time."""
    return 0 if age < LOAD_SECONDS else 20 + (index * 13 + int(age * 3)) % 60


def _workers(root: Path, now: float) -> list[tuple[int, str, list[int], float]]:
    """Running sim workers of the sandbox: (pid, process name, GPU indexes, seconds since start)."""
    store = UnitStore(root)
    found = []
    for name in store.started_names():
        state, unit = store.read_state(name), store.load(name)
        child = state.child_proc()
        if unit is None or child is None or not SIM_WORKERS & set(unit.argv) or not child.alive():
            continue
        found.append((child.pid, unit.argv[0], _worker_gpus(unit.argv, unit.env), now - state.since_us / 1e6))
    return found


def _worker_gpus(argv: list[str], env: dict[str, str]) -> list[int]:
    """The ``--gpus 0,1,2,3`` of a worker's argv, else its unit's CUDA_VISIBLE_DEVICES (the worker's own rule)."""
    value = env.get("CUDA_VISIBLE_DEVICES") or "0"
    for i, arg in enumerate(argv):
        if arg == "--gpus" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--gpus="):
            value = arg.partition("=")[2]
    return [int(part) for part in value.split(",") if part.strip().isdigit()]


# --------------------------------------------------------------------------- output

@dataclass(frozen=True, slots=True)
class Query:
    kind: str                  # "gpu" or "apps"
    fields: tuple[str, ...]
    header: bool
    units: bool


def render(query: Query, gpus: list[SimGpu]) -> list[str]:
    """One round of a query: CSV lines, joined by ``, `` as nvidia-smi does."""
    known = GPU_FIELDS if query.kind == "gpu" else APP_FIELDS
    lines = [", ".join(known[f][0] for f in query.fields)] if query.header else []
    if query.kind == "gpu":
        rows = [[(gpu.value(f), known[f][1]) for f in query.fields] for gpu in gpus]
    else:
        rows = [[(_app_value(gpu, app, f), known[f][1]) for f in query.fields] for gpu in gpus for app in gpu.apps]
    for row in rows:
        lines.append(", ".join(f"{value} {unit}" if unit and query.units else str(value) for value, unit in row))
    return lines


def _app_value(gpu: SimGpu, app: App, query: str) -> str | int:
    values: dict[str, str | int] = {"gpu_uuid": gpu.uuid, "gpu_bus_id": gpu.bus_id, "gpu_name": MODEL, "pid": app.pid,
            "process_name": app.name, "used_memory": app.used_mib, "used_gpu_memory": app.used_mib}
    return values[query]


def topology() -> list[str]:
    """``nvidia-smi topo -m`` of the box: NV18 between GPUs, one NIC per GPU pair."""
    gpus, nics = [f"GPU{i}" for i in range(COUNT)], [f"NIC{i}" for i in range(NICS)]
    lines = ["\t" + "\t".join(gpus + nics + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for g in range(COUNT):
        cells = [" X " if g == other else "NV18" for other in range(COUNT)] + [_link(g, n) for n in range(NICS)]
        lines.append("\t".join([gpus[g], *cells, CPU_AFFINITY[_node(g)], str(_node(g)), "", "N/A"]))
    for n in range(NICS):
        cells = [_link(g, n) for g in range(COUNT)]
        cells += [_nic_link(n, other) for other in range(NICS)]
        lines.append("\t".join([nics[n], *cells]))
    lines += ["", "Legend:", "",
              "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
              "within a NUMA node",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set of # NVLinks", "",
              "NIC Legend:", ""]
    lines += [f"  NIC{n}: mlx5_{n}" for n in range(NICS)]
    return lines + [""]


def _node(gpu: int) -> int:
    return 0 if gpu < COUNT // 2 else 1


def _nic_node(nic: int) -> int:
    return _node(nic * COUNT // NICS)


def _nic_link(nic: int, other: int) -> str:
    if nic == other:
        return " X "
    return "NODE" if _nic_node(nic) == _nic_node(other) else "SYS"


def _link(gpu: int, nic: int) -> str:
    if gpu * NICS // COUNT == nic:
        return "PIX"
    return "NODE" if _node(gpu) == _nic_node(nic) else "SYS"


def list_gpus(gpus: list[SimGpu]) -> list[str]:
    return [f"GPU {gpu.index}: {MODEL} (UUID: {gpu.uuid})" for gpu in gpus]


# --------------------------------------------------------------------------- command line

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:   # type: ignore[override]
        raise Usage(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nvidia-smi", add_help=False, allow_abbrev=False)
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("--query-gpu", default=None)
    parser.add_argument("--query-compute-apps", default=None)
    parser.add_argument("--format", default=None)
    parser.add_argument("-l", "--loop", type=int, default=None)
    parser.add_argument("-lms", "--loop-ms", type=int, default=None)
    parser.add_argument("-L", "--list-gpus", action="store_true")
    return parser


def parse_query(args: argparse.Namespace) -> Query:
    if (args.query_gpu is None) == (args.query_compute_apps is None):
        raise Usage("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    kind, text = ("gpu", args.query_gpu) if args.query_gpu is not None else ("apps", args.query_compute_apps)
    known = GPU_FIELDS if kind == "gpu" else APP_FIELDS
    fields = tuple(f.strip() for f in text.split(",") if f.strip())
    for name in fields:
        if name not in known:
            raise Usage(f'Field "{name}" is not a valid field to query.')
    options = (args.format or "").split(",")
    if not fields or options[0] != "csv" or not set(options[1:]) <= {"noheader", "nounits"}:
        raise Usage('"--format" must be csv, optionally with noheader and nounits (e.g. --format=csv,noheader).')
    return Query(kind, fields, "noheader" not in options, "nounits" not in options)


def _interval(args: argparse.Namespace) -> float | None:
    if args.loop_ms is not None:
        return max(args.loop_ms, 1) / 1000
    return max(args.loop, 1) if args.loop is not None else None


def _write(lines: list[str]) -> None:
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    root = args.root or (Path(os.environ[ROOT_ENV]) if os.environ.get(ROOT_ENV) else None)
    if args.list_gpus:
        _write(list_gpus(load_gpus(root, time.time())))
        return 0
    query, interval = parse_query(args), _interval(args)
    _write(render(query, load_gpus(root, time.time())))
    while interval is not None:
        time.sleep(interval)
        _write(render(Query(query.kind, query.fields, False, query.units), load_gpus(root, time.time())))
    return 0


def topo(args: list[str]) -> int:
    if args not in (["-m"], ["--matrix"]):
        raise Usage("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    _write(topology())
    return 0


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    try:
        if "topo" in raw:
            return topo(raw[raw.index("topo") + 1:])
        return run(_parser().parse_args(raw))
    except Usage as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        # The reader went away (the sampler stopped): leave quietly, without a second error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
