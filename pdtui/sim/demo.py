"""`pdtui demo`: the reference deployment, simulated on this machine.

A sandbox holds the three reference units (prefill GPUs 0-3 NUMA 0, decode
GPUs 4-7 NUMA 1, router) run by pdtui's systemd stand-in: SGLang-like sim
workers and a real router, ``smg`` or ``sglang-router``, when one is installed
(a small simulated router otherwise, or when asked for). The deployment config
is generated as YAML with a ``launch:`` block per service and loaded like any
user's; its units are the ones ``pdtui units`` makes of it. So the demo
exercises exactly the path ``pdtui units --install`` and ``pdtui up`` take.

``--shape`` puts more backends on the same eight GPUs: one prefill and two
decodes (``1p2d``), or two of each (``2p2d``), each prefill with a bootstrap
port of its own, the router in front of them all. A ``broken-pair`` decode
cannot reach the first prefill's bootstrap server: only the requests routed
through that pair fail.

The workers serve ``/metrics`` (``--enable-metrics``, as the reference
deployment's do), and unless asked not to, a light load runs through the router
from the start (:mod:`pdtui.sim.load`, which waits for the router by itself), so
there are live serving figures to watch. The sandbox stops it with the units.

``--real``: real SGLang on this machine's CPU in place of the sim's workers
(pdtui/sim/real_sglang.py), or real vLLM with ``--engine vllm``
(pdtui/sim/real_vllm.py), serving a tiny model made here, the whole demo in a
network namespace of its own; the same units, checks and faces.

``--slurm``: the reference three as jobs on a private one-node Slurm cluster of
this machine (pdtui/sim/slurm_cluster.py): prefill and decode each get four of its
eight GPUs from Slurm, the router is submitted once both are ready.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pdtui.commands.units_command import write_units
from pdtui.config import Deployment, parse_config
from pdtui.config.schema import RANK_MARK
from pdtui.sim import real_sglang, real_vllm
from pdtui.sim.command_lines import REAL_ROUTERS, SIM_ROUTER, default_router, sim_python
from pdtui.sim.knobs import DEFAULT_GENERATION, DEFAULT_MODEL, DEMO_FAIL_MODES, FABRIC_FAIL_MODES, FAIL_MODES
from pdtui.sim.ports import free_port, port_is_free
from pdtui.sim.sandbox import Sandbox
from pdtui.sim.slurm_cluster import PrivateCluster
from pdtui.sim.sysfs import FabricShape, nic_beside, write_tree
from pdtui.sim.systemctl import package_env
from pdtui.targets import PLACEMENTS
from pdtui.targets.systemd.unit_files import render_units


@dataclass(frozen=True)
class Backend:
    """One SGLang server of a shape: its service's name, its role and its place on the stand-in's eight GPUs."""

    name: str
    role: str
    gpus: tuple[int, ...]
    numa: int


# Prefills on NUMA node 0's GPUs (0-3), decodes on node 1's (4-7), as the reference deployment places them.
SHAPE_BACKENDS: dict[str, tuple[Backend, ...]] = {
    "1p1d": (Backend("prefill", "prefill", (0, 1, 2, 3), 0), Backend("decode", "decode", (4, 5, 6, 7), 1)),
    "1p2d": (Backend("prefill", "prefill", (0, 1, 2, 3), 0), Backend("decode-0", "decode", (4, 5), 1),
             Backend("decode-1", "decode", (6, 7), 1)),
    "2p2d": (Backend("prefill-0", "prefill", (0, 1), 0), Backend("prefill-1", "prefill", (2, 3), 0),
             Backend("decode-0", "decode", (4, 5), 1), Backend("decode-1", "decode", (6, 7), 1)),
}
FABRIC = "fabric"             # --fail fabric:MODE breaks the host's, not a service
REFERENCE_SHAPE = "1p1d"      # the reference deployment's: the only shape that takes its ports
WIDE = "decode"               # --nodes N: the reference decode spans N nodes (its GPUs 4-7 on each)
MAX_NODES = 4
# What --slurm adds to the worker's failure modes: a job Slurm cannot place yet.
SLURM_FAIL_MODES = {"pending": "its job asks for more GPUs than the cluster has free: it waits in the queue "
                               "(Resources) until its timeout"}
JOB_GPUS, PENDING_GPUS = 4, 6     # of the cluster's eight: prefill and decode fit, a 6-GPU job beside a 4 waits
VLLM = "vllm"                     # --engine vllm: the workers play vLLM's servers, vllm-router in front
VLLM_ROUTER_MODULE = "vllm_router.launch_router"
SIDE_CHANNEL = "side-channel"
# What a vLLM worker of the demo can be made to do (--fail SERVICE:MODE with --engine vllm).
VLLM_FAIL_MODES = {"block-size": "start-up dies: no block size its attention backend takes (EngineCore failed to "
                                 "start)",
                   "kv-memory": "start-up dies: the KV cache does not fit the memory left",
                   "hang": "start-up stops after its weights load, the HTTP port never listening",
                   "crash-after-ready": "its engine core dies a few seconds after it is ready",
                   "side-channel": "it takes the other server's NIXL side-channel port: it hangs at start, as vLLM "
                                   "does"}
# A real router waits for the requests in flight when stopped, up to 180 s by default, and the demo's load
# always has some: the demo's stops within a second.
REAL_ROUTER_ARGS = ["--shutdown-grace-period-secs", "1"]
# By name: a service's HTTP port, a prefill's bootstrap port (NAME/bootstrap), the router's Prometheus port.
REFERENCE_PORTS = {"prefill": 30000, "router": 30001, "decode": 30002, "prefill/bootstrap": 8998, "metrics": 29000}


@dataclass(frozen=True)
class DemoOptions:
    failures: dict[str, str]          # service -> failure mode ("fabric" -> what is broken in the host's sysfs)
    startup: float = 6.0              # seconds the decode worker takes to get ready (prefill a bit less)
    timeout: str = "2m"
    router: str = field(default_factory=default_router)   # a package of pdtui.sim.command_lines.ROUTERS
    generation: str = DEFAULT_GENERATION   # which SGLang release's wording the workers speak
    reference_ports: bool = True      # the reference deployment's ports where free; False: ports the OS picks
    canary: str = "10s"               # the router's canary interval: often enough to watch it work
    shape: str = REFERENCE_SHAPE      # a key of SHAPE_BACKENDS: how many prefills and decodes
    real: str | None = None           # real SGLang on the CPU serving this model (its path), not the sim's workers
    nodes: int = 1                    # the decode spans this many nodes (gpu0, gpu1, ...: a sandbox each)
    engine: str = "sglang"            # which serving engine the workers play: sglang, or vllm (vllm-router in front)

    @property
    def backends(self) -> tuple[Backend, ...]:
        return SHAPE_BACKENDS[self.shape]


def parse_failure(text: str, slurm: bool = False, shape: str = REFERENCE_SHAPE, nodes: int = 1,
                  engine: str = "sglang") -> tuple[str, str]:
    """``SERVICE:MODE`` as given to ``--fail``, SERVICE a prefill or decode of ``shape`` (with ``--slurm``, a
    Slurm mode too; with ``nodes``, a rank of the wide decode, ``decode@1``; with ``engine`` vllm, vLLM's modes);
    ValueError with a one-line message otherwise."""
    service, sep, mode = text.partition(":")
    if service == FABRIC and engine != VLLM:
        return _fabric_failure(text, mode, slurm)
    backends = {backend.name: backend for backend in SHAPE_BACKENDS[shape]}
    backends |= {f"{WIDE}{RANK_MARK}{rank}": backends[WIDE] for rank in range(1, nodes)}
    modes = VLLM_FAIL_MODES if engine == VLLM else {**FAIL_MODES, **DEMO_FAIL_MODES, **(SLURM_FAIL_MODES if slurm else {})}
    if sep and mode in modes and service not in backends:
        raise ValueError(f"--fail {text}: the {shape} demo has no service {service!r}; its prefills and decodes: "
                         f"{', '.join(backends)}")
    if not sep or service not in backends or mode not in modes:
        raise ValueError(f"--fail expects SERVICE:MODE with SERVICE one of {', '.join(backends)} and MODE one of "
                         f"{', '.join(modes)}, got {text!r}")
    if mode in DEMO_FAIL_MODES and backends[service].role != "decode":
        decodes = [name for name, backend in backends.items() if backend.role == "decode"]
        why = {"broken-pair": "it cannot reach a prefill's bootstrap server",
               "page-size": "it runs another page size than the prefills"}[mode]
        raise ValueError(f"--fail {text}: {mode} is a decode's ({why}); the "
                         f"{shape} demo's decodes: {', '.join(decodes)}")
    return service, mode


def _fabric_failure(text: str, mode: str, slurm: bool) -> tuple[str, str]:
    if slurm:
        raise ValueError(f"--fail {text}: the Slurm demo's nodes are placed by Slurm; their fabric is not checked")
    if mode not in FABRIC_FAIL_MODES:
        raise ValueError(f"--fail fabric:MODE expects MODE one of {', '.join(FABRIC_FAIL_MODES)}, got {text!r}")
    return FABRIC, mode


PORTS_ENV = "PDTUI_DEMO_PORTS"   # "any": ports the OS picks instead of the reference deployment's


def reference_ports_wanted(environ: Mapping[str, str]) -> bool:
    """Whether the demo takes the reference ports (30000...) where free, or (``PDTUI_DEMO_PORTS=any``) ports the OS
    picks: a port found free can still be taken by another program before the worker binds it, so a run beside
    other demos (a test suite, a second demo) asks for OS-picked ones. ValueError for anything else."""
    value = environ.get(PORTS_ENV, "reference")
    if value not in ("reference", "any"):
        raise ValueError(f"{PORTS_ENV} expects reference or any, got {value!r}")
    return value == "reference"


def ports_for(options: DemoOptions) -> dict[str, int]:
    """Every port the demo's services take, by name (see :data:`REFERENCE_PORTS`), all distinct: the reference
    ports where they are free (the reference shape only, unless asked not to), ports the OS picks otherwise.

    Tests ask for OS-picked ports only: two runs side by side would both find
    30000 free and race to bind it.
    """
    backends = options.backends
    names = [*(b.name for b in backends), "router", *(f"{b.name}/bootstrap" for b in backends if b.role == "prefill"),
             "metrics", *(f"{b.name}/{SIDE_CHANNEL}" for b in backends if options.engine == VLLM),
             *(f"{WIDE}{RANK_MARK}{rank}" for rank in range(1, options.nodes)),
             *([f"{WIDE}/dist"] if options.nodes > 1 else [])]
    wanted = REFERENCE_PORTS if options.reference_ports and options.shape == REFERENCE_SHAPE else {}
    # a demo that does not take the reference ports leaves them to one that does (the counter of free_port walks
    # through 30000 too, after some thirteen thousand ports handed out)
    spared = set() if wanted else set(REFERENCE_PORTS.values())
    ports: dict[str, int] = {}
    for name in names:
        port = wanted.get(name) or free_port()
        while port in ports.values() or port in spared or not port_is_free(port):
            port = free_port()
        ports[name] = port
    return ports


def build(sandbox: Sandbox, options: DemoOptions) -> Deployment:
    """Write the demo's config with a ``launch:`` per service, install the units ``pdtui units`` makes of
    it in ``sandbox``, and return its deployment (loaded like any user's)."""
    machines = {"gpu0": sandbox, **{f"gpu{n}": sandbox.node(f"gpu{n}") for n in range(1, options.nodes)}}
    hosts = {name: _local_host(machine, options) for name, machine in machines.items()}
    text = yaml.safe_dump(config(options, ports_for(options), hosts), sort_keys=False)
    path = sandbox.root / "demo.yaml"
    path.write_text(text)
    deployment = parse_config(text, str(path), PLACEMENTS)
    for name, machine in machines.items():
        write_units([unit for unit in render_units(deployment) if unit.host == name], machine.root / "units")
    return deployment


def _local_host(machine: Sandbox, options: DemoOptions) -> dict[str, Any]:
    """A host of the demo: a sandbox of this machine, reached directly, its fabric as ``--fail fabric:`` breaks it."""
    sysfs = write_tree(machine.root / "sys", FabricShape.failing(options.failures.get(FABRIC)))
    return {"local": True, "commands": machine.commands, "unit_dir": str(machine.root / "units"), "sysfs": str(sysfs)}


def build_slurm(cluster: PrivateCluster, options: DemoOptions) -> Deployment:
    """Write the demo's config as jobs on ``cluster`` (its ``demo.yaml``) and return its deployment."""
    ports = ports_for(options)
    services = _services(options, ports)
    pythonpath = {"PYTHONPATH": package_env()["PYTHONPATH"]}     # the sim's programs run without site-packages
    for svc in services.values():
        svc["launch"]["env"] = pythonpath
    backends = {backend.name for backend in options.backends}

    def job(name: str) -> dict[str, Any]:
        if name not in backends:
            return {}
        if options.failures.get(name) == "pending":     # it yields to the other (nice): that one gets its GPUs first
            return {"gpus_per_node": PENDING_GPUS, "args": ["--nice=100"]}
        if name == WIDE and options.nodes > 1:          # one job over the nodes, its ranks met at its first node's
            launch = services[name]["launch"]
            ranks = [services[name]["port"], *(ports[f"{WIDE}{RANK_MARK}{r}"] for r in range(1, options.nodes))]
            launch["args"] = [*launch["args"], "--rank-ports", ",".join(map(str, ranks))]   # one machine's nodes
            return {"gpus_per_node": JOB_GPUS, "nodes": options.nodes, "dist_port": launch.pop("dist_port")}
        return {"gpus_per_node": JOB_GPUS}

    config = {"name": "dsv4-flash-pd (slurm demo)",
              "clusters": {"slurm": {"local": True, "output_dir": str(cluster.jobs_dir), "commands": cluster.commands}},
              "services": {name: {"cluster": "slurm", **svc, "job": job(name)} for name, svc in services.items()}}
    text = yaml.safe_dump(config, sort_keys=False)
    path = cluster.root / "demo.yaml"
    path.write_text(text)
    return parse_config(text, str(path), PLACEMENTS)


def config(options: DemoOptions, ports: dict[str, int], hosts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The demo's config (as YAML would hold it): every service as a unit on gpu0, but the wide decode's ranks >= 1
    on gpu1 and up (``hosts``: each host's settings), each its own port (they share this machine)."""
    prefix = "vllm" if options.engine == VLLM else "sglang"
    placed: dict[str, dict[str, Any]] = {
        backend.name: {"host": "gpu0", "unit": f"{prefix}-dsv4-{backend.name}",
                       **({} if options.real else {"gpus": list(backend.gpus), "numa": backend.numa})}
        for backend in options.backends}
    placed["router"] = {"host": "gpu0", "unit": f"{prefix}-dsv4-router"}
    if options.nodes > 1:
        wide = placed[WIDE]
        wide["hosts"] = [wide.pop("host"), *({"host": f"gpu{rank}", "port": ports[f"{WIDE}{RANK_MARK}{rank}"]}
                                             for rank in range(1, options.nodes))]
    name = "tiny-gpt2-pd (real SGLang demo)" if options.real else "dsv4-flash-pd (demo)"
    if options.engine == VLLM:
        name = "tiny-llama-pd (real vLLM demo)" if options.real else "dsv4-flash-vllm (demo)"
        return {"name": name, "engine": VLLM, "hosts": hosts,
                "services": {name: {**placed[name], **svc} for name, svc in _vllm_services(options, ports).items()}}
    return {"name": name, "hosts": hosts,
            "services": {name: {**placed[name], **svc} for name, svc in _services(options, ports).items()}}


def _services(options: DemoOptions, ports: dict[str, int]) -> dict[str, dict]:
    """The shape's prefills and decodes and the router in front of them all, with their launch blocks, wherever
    they run."""
    services = {backend.name: _backend(options, backend, ports) for backend in options.backends}
    router = (sim_python("pdtui.sim.router") if options.router == SIM_ROUTER
              else [sys.executable, "-m", f"{REAL_ROUTERS[options.router]}.launch_router"])
    services["router"] = {
        "role": "router", "port": ports["router"], "timeout": options.timeout, "canary": options.canary,
        "after": [backend.name for backend in options.backends],
        "launch": {"command": router, "host": "127.0.0.1", "prometheus_port": ports["metrics"],
                   **({"package": options.router, "args": REAL_ROUTER_ARGS} if options.router in REAL_ROUTERS else {})}}
    return services


def _vllm_services(options: DemoOptions, ports: dict[str, int]) -> dict[str, dict]:
    """vLLM's servers (the stand-in of pdtui/sim/vllm_worker.py, NIXL between them) and the real vllm-router."""
    services: dict[str, dict] = {}
    clash = SIDE_CHANNEL in options.failures.values()      # every server given the first one's side-channel port
    first = options.backends[0].name
    for backend in options.backends:
        startup = options.startup * 0.8 if backend.role == "prefill" else options.startup
        mode = options.failures.get(backend.name)
        args = ["--startup", f"{startup:g}", *(["--fail", mode] if mode and mode != SIDE_CHANNEL else [])]
        # Ports the OS picked, as every port of the demo: vLLM's default 5600 would be another demo's too.
        side = ports[f"{first if clash else backend.name}/{SIDE_CHANNEL}"]
        env = {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)}
        if options.real:      # on the CPU: no GPU, the KV kept in its memory
            real = real_vllm.launch(backend.role, Path(options.real))
            launch = {**real, "env": {**real["env"], **env}}
        else:
            launch = {"command": [sys.executable, "-m", "pdtui.sim.vllm_worker"], "model": DEFAULT_MODEL,
                      "tp": len(backend.gpus), "host": "127.0.0.1", "args": args, "env": env}
        services[backend.name] = {"role": backend.role, "port": ports[backend.name], "timeout": options.timeout,
                                  "launch": launch}
    services["router"] = {
        "role": "router", "port": ports["router"], "timeout": options.timeout, "canary": options.canary,
        "after": [backend.name for backend in options.backends],
        "launch": {"command": [sys.executable, "-m", VLLM_ROUTER_MODULE], "host": "127.0.0.1",
                   "prometheus_port": ports["metrics"]}}
    return services


def _backend(options: DemoOptions, backend: Backend, ports: dict[str, int]) -> dict[str, Any]:
    """A prefill or decode service: a sim worker with the failure asked for it (a prefill gets ready a bit sooner)."""
    prefill = backend.role == "prefill"
    bootstrap = {"bootstrap_port": ports[f"{backend.name}/bootstrap"]} if prefill else {}
    if options.real:       # on the CPU: no GPU, no RDMA device
        return {"role": backend.role, "port": ports[backend.name], **bootstrap, "timeout": options.timeout,
                "launch": real_sglang.launch(backend.role, Path(options.real))}
    startup = options.startup * 0.8 if prefill else options.startup
    args = ["--startup", f"{startup:g}", "--generation", options.generation, "--enable-metrics",
            *_failure_args(options, backend.name, ports)]
    # With site-packages (no -S): its /metrics is prometheus_client's.
    nodes = options.nodes if backend.name == WIDE else 1
    launch = {"command": [sys.executable, "-m", "pdtui.sim.worker"], "model": DEFAULT_MODEL,
              "tp": len(backend.gpus) * nodes, "host": "127.0.0.1", "ib_device": nic_beside(backend.gpus[0]),
              "args": args, **({"dist_port": ports[f"{WIDE}/dist"]} if nodes > 1 else {})}
    return {"role": backend.role, "port": ports[backend.name], **bootstrap, "timeout": options.timeout,
            "launch": launch}


def _failure_args(options: DemoOptions, service: str, ports: dict[str, int]) -> list[str]:
    """The worker flags that play the failure asked for ``service``: a worker's own mode, a broken pair (the
    first prefill's bootstrap port unreachable from this decode), or a page size the prefills do not run."""
    mode = options.failures.get(service)
    ranks = [(name, failure) for name, failure in options.failures.items() if name.startswith(f"{service}{RANK_MARK}")]
    if ranks:       # a rank >= 1 of the wide decode: its launch (all ranks') says which node plays it
        name, failure = ranks[0]
        return ["--fail", failure, "--fail-rank", name.rpartition(RANK_MARK)[2]]
    if mode in FAIL_MODES:
        return ["--fail", mode]
    if "page-size" in options.failures.values():     # every prefill says its page size; that decode another
        return ["--page-size", "128" if mode == "page-size" else "64"]
    if mode == "broken-pair":
        first = next(backend.name for backend in options.backends if backend.role == "prefill")
        return ["--unreachable-bootstrap", str(ports[f"{first}/bootstrap"])]
    return []


def start_load(sandbox: Sandbox, deployment: Deployment) -> None:
    """The demo's traffic: :mod:`pdtui.sim.load` against the router, spawned in ``sandbox`` (whose
    :meth:`~pdtui.sim.sandbox.Sandbox.stop_all` stops it by PID); its lines go to ``ROOT/load.log``."""
    router = deployment.services["router"]
    model = next((svc.launch.model for svc in deployment.services.values() if svc.launch and svc.launch.model),
                 DEFAULT_MODEL)      # the served name: smg routes a chat by it
    argv = [*sim_python("pdtui.sim.load"), "--url", f"http://127.0.0.1:{router.port}", "--model", model]
    sandbox.spawn("load", argv)
