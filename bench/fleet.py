"""Fleet: pdtui's engine alone bringing up a thousand services on in-memory hosts.

No process, no SSH, no journal on disk: every host is a :class:`pdtui.sim.memhost.MemoryHost`,
which answers systemctl, journalctl, nvidia-smi and HTTP in-process, and whose
backends (:mod:`pdtui.sim.memservers`) log SGLang's start-up wording over ``--startup`` seconds (routers take
``--router-startup``). The engine runs as ``pdtui up`` runs it (production timing,
smoke generation on, the drift check against the units ``pdtui units`` renders).
Each host has N services: N-1 backends (half prefill, rounded down, the rest decode,
one GPU each) and a router after them.

bringup_overhead_s = wall time (from making the Orchestrator to its Done) - the services' own
start-up on the critical path (a backend's start-up, then its router's). cpu_s is the process's CPU time during
the bring-up, engine_cpu_s the same without the time the in-memory hosts spent answering
(memory_hosts_s), gc_s the garbage collector's share; rss_mb is the peak RSS.
``--sweep`` runs 8, 16, ... up to ``--max-services`` services, each size in a fresh
process, to show how the overhead grows. ``--core-only`` turns the checks that ask the servers more than whether
they are ready (:data:`CORE_ONLY`) into no-ops: the orchestration's own cost, told apart from theirs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import emit, machine, parse_args, percentile  # noqa: E402
from pdtui.config import Deployment, parse_config  # noqa: E402
from pdtui.engine.events import StateChanged, Step, StepChanged, StepStatus  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.engine.preflight import Preflight  # noqa: E402
from pdtui.engine.router_proving import RouterProving  # noqa: E402
from pdtui.engine.service_run import ServiceRun  # noqa: E402
from pdtui.engine.states import ServiceState  # noqa: E402
from pdtui.sim.knobs import DEFAULT_MODEL  # noqa: E402
from pdtui.sim.memhost import MemoryFleet  # noqa: E402
from pdtui.support.heap import QuietCollector  # noqa: E402
from pdtui.targets import PLACEMENTS  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402
from pdtui.targets.systemd.unit_files import render_units  # noqa: E402

GPUS_PER_HOST = 8


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--services-per-host", type=int, default=8, help="N-1 backends and a router (N >= 3)")
    parser.add_argument("--startup", type=float, default=3.0, help="seconds a backend takes to its ready line")
    parser.add_argument("--router-startup", type=float, default=0.5, help="seconds a router takes to activate its workers")
    parser.add_argument("--runs", type=int, default=1, help="bring-ups in this process; figures are their medians")
    parser.add_argument("--sweep", action="store_true", help="8, 16, ... services up to --max-services, a process each")
    parser.add_argument("--max-services", type=int, default=1024)
    parser.add_argument("--no-pairs", action="store_true",
                        help="do not prove each router's prefill × decode pairs directly (as pdtui up --no-pairs)")
    parser.add_argument("--collector", choices=("python", "pdtui"), default="pdtui",
                        help="the garbage collector as pdtui's faces tune it (pdtui.support.heap.QuietCollector: young "
                             "collections after 10,000 allocations, what exists at the start frozen), or as Python "
                             "sets it")
    parser.add_argument("--core-only", action="store_true",
                        help="the orchestration's own cost: the checks that ask the servers more than whether they "
                             "are ready turned into no-ops (see CORE_ONLY)")


async def _no_server_info(orchestrator: Orchestrator, backend: ServiceRun) -> None:
    return None


async def _no_missing_workers(proving: RouterProving) -> None:
    proving._may_lack = False


CORE_ONLY: tuple[tuple[type, str, object], ...] = (
    (Preflight, "_pair_mismatches", lambda preflight, runs, commands: []),      # the command lines compared
    (Preflight, "_host_mismatches", lambda preflight, runs, commands: []),
    (Preflight, "_fabric_mismatches", lambda preflight, runs, commands, inventories, fabrics: []),
    (Orchestrator, "_server_info", _no_server_info),            # each backend's account, before its router starts
    (ServiceRun, "has_metrics", property(lambda run: False)),   # the KV series read around each router's smoke
    (RouterProving, "add_missing", _no_missing_workers),        # the router's workers looked at through its API
)
"""What ``--core-only`` turns into no-ops: what a bring-up asks beyond the units, their lines and the routers'
probes, to tell the orchestration's own cost from those checks'."""


def core_only() -> None:
    for owner, name, stand_in in CORE_ONLY:
        if not hasattr(owner, name):
            sys.exit(f"fleet: --core-only: {owner.__name__}.{name} is no more: CORE_ONLY needs updating")
        setattr(owner, name, stand_in)


def fleet_config(hosts: int, per_host: int) -> dict:
    """Hosts h000, h001, ... each with per_host - 1 backends and one router after them."""
    backends = per_host - 1
    prefills = backends // 2
    gpus = max(GPUS_PER_HOST, backends)
    config: dict = {"name": f"fleet-{hosts * per_host}", "hosts": {}, "services": {}}
    for h in range(hosts):
        host = f"h{h:03d}"
        config["hosts"][host] = {"address": f"{host}.fleet.internal"}
        names = []
        for i in range(backends):
            role = "prefill" if i < prefills else "decode"
            name = f"{host}-{role}{i}"
            names.append(name)
            config["services"][name] = {
                "host": host, "unit": f"sglang-{role}{i}", "role": role, "gpus": [i], "numa": 0 if i < gpus // 2 else 1,
                "port": 30000 + 2 * i, **({"bootstrap_port": 8998 - i} if role == "prefill" else {}), "timeout": "2m",
                "launch": {"model": DEFAULT_MODEL, "tp": 1, "transfer_backend": "mooncake"}}
        config["services"][f"{host}-router"] = {"host": host, "unit": "sglang-router", "role": "router", "port": 8000,
                                                "after": names, "timeout": "1m", "launch": {"package": "sglang-router"}}
    return config


def load(config: dict) -> Deployment:
    """The config as a user's YAML file is loaded."""
    return parse_config(yaml.safe_dump(config, sort_keys=False), "fleet.yaml", PLACEMENTS)


class GcTime:
    """Time the garbage collector took, and its full collections, while in use."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._t0
        self.full += info["generation"] == 2

    def __enter__(self) -> GcTime:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


class Moments:
    """When each service turned READY (time.perf_counter)."""

    def __init__(self) -> None:
        self.ready: dict[str, float] = {}
        self.events: Counter[str] = Counter()
        self.preflight_done: float | None = None

    def __call__(self, event: object) -> None:
        self.events[type(event).__name__] += 1
        if isinstance(event, StepChanged) and event.step is Step.PREFLIGHT and event.status is StepStatus.DONE:
            self.preflight_done = time.perf_counter()
        if isinstance(event, StateChanged) and event.new is ServiceState.READY:
            self.ready[event.service] = time.perf_counter()


async def bring_up(deployment: Deployment, args: argparse.Namespace) -> dict:
    """One bring-up of the whole fleet; its figures."""
    units = {(u.host, u.name): u.text for u in render_units(deployment)}
    fleet = MemoryFleet(deployment, startup=args.startup, router_startup=args.router_startup, unit_files=units)
    moments = Moments()
    cpu0, t0 = time.process_time(), time.perf_counter()
    orchestrator = Orchestrator(deployment, Registry(fleet.host), pairs=False if args.no_pairs else None)
    orchestrator.subscribe(moments)
    try:
        with GcTime() as collector:
            done = await orchestrator.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await orchestrator.close()
        fleet.stop_all()
    return {"ok": done.ok, "failures": dict(list(done.failures.items())[:5]), "wall_s": wall, "cpu_s": cpu,
            "bringup_overhead_s": wall - args.startup - args.router_startup,
            "memory_hosts_s": fleet.meter.seconds, "engine_cpu_s": cpu - fleet.meter.seconds,
            "gc_s": collector.seconds, "gc_full_collections": collector.full,
            "phases": phases(fleet, moments, t0, args), "commands": dict(sorted(fleet.counts.items())),
            "events": dict(sorted(moments.events.items()))}


def phases(fleet: MemoryFleet, moments: Moments, t0: float, args: argparse.Namespace) -> dict:
    """Where the overhead goes: each step's lag, p50 and max over the services (seconds)."""
    backends = [s for s in fleet.services.values() if s.cfg.role != "router"]
    routers = [s for s in fleet.services.values() if s.cfg.role == "router"]

    def spread(values: list[float]) -> dict:
        ordered = sorted(values)
        return {"p50": round(percentile(ordered, 50), 4), "max": round(ordered[-1], 4)} if ordered else {}

    def started(s) -> float:
        return s.started_at if s.started_at is not None else float("nan")

    return {
        "preflight_done_after_s": round(moments.preflight_done - t0, 4) if moments.preflight_done else None,
        "backend_started_after_s": spread([started(s) - t0 for s in backends]),
        "backend_ready_seen_after_s": spread([moments.ready[s.cfg.name] - s.ready_at for s in backends
                                              if s.cfg.name in moments.ready and s.ready_at]),
        "router_started_after_backends_ready_s": spread([started(r) - max(moments.ready[b] for b in r.cfg.after)
                                                         for r in routers if all(b in moments.ready for b in r.cfg.after)]),
        "router_ready_seen_after_s": spread([moments.ready[r.cfg.name] - r.ready_at for r in routers
                                             if r.cfg.name in moments.ready and r.ready_at]),
    }


def one_size(args: argparse.Namespace) -> dict:
    """``--runs`` bring-ups of one fleet in this process: medians, and every run's overhead."""
    t0 = time.perf_counter()
    deployment = load(fleet_config(args.hosts, args.services_per_host))
    parse_s = time.perf_counter() - t0
    collector = QuietCollector() if args.collector == "pdtui" else None
    runs = []
    for _ in range(args.runs):
        if collector is not None:
            collector.start()
            collector.settle()
        try:
            runs.append(asyncio.run(bring_up(deployment, args)))
        finally:
            if collector is not None:
                collector.restore()
    last = runs[-1]
    keys = ("wall_s", "bringup_overhead_s", "cpu_s", "engine_cpu_s", "memory_hosts_s", "gc_s")
    median = {key: round(statistics.median(r[key] for r in runs), 3) for key in keys}
    return {"services": len(deployment.services), "hosts": len(deployment.hosts), "collector": args.collector,
            "no_pairs": args.no_pairs, "core_only": args.core_only,
            "services_per_host": args.services_per_host, "runs": args.runs, "ok": all(r["ok"] for r in runs),
            **median, "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "overhead_each_run_s": [round(r["bringup_overhead_s"], 3) for r in runs],
            "gc_full_collections": last["gc_full_collections"],
            "startup_s": args.startup, "router_startup_s": args.router_startup, "config_parse_s": round(parse_s, 3),
            "failures": last["failures"], "phases": last["phases"], "commands": last["commands"], "events": last["events"]}


def sweep(args: argparse.Namespace) -> list[dict]:
    """Each size in a fresh process (its own peak RSS, no warm caches from a bigger run)."""
    per_host, results = args.services_per_host, []
    hosts = 1
    while hosts * per_host <= args.max_services:
        argv = [sys.executable, __file__, "--hosts", str(hosts), "--services-per-host", str(per_host),
                "--startup", str(args.startup), "--router-startup", str(args.router_startup), "--runs", str(args.runs),
                "--collector", args.collector, *(["--no-pairs"] if args.no_pairs else []),
                *(["--core-only"] if args.core_only else [])]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        figures = json.loads(out)
        results.append({k: figures[k] for k in ("services", "hosts", "ok", "wall_s", "bringup_overhead_s", "cpu_s",
                                                "engine_cpu_s", "memory_hosts_s", "gc_s", "rss_mb", "overhead_each_run_s")})
        hosts *= 2
    return results


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    if args.services_per_host < 3:
        sys.exit("fleet: --services-per-host must be at least 3 (a prefill, a decode and their router)")
    if args.core_only:
        core_only()
    if args.quick:
        args.startup, args.router_startup = 0.3, 0.1
        if args.sweep:
            args.max_services = 2 * args.services_per_host
        else:
            args.hosts, args.services_per_host = 2, 4
    info = machine()
    if args.sweep:
        emit({"machine": info, "quick": args.quick, "sweep": sweep(args), "services_per_host": args.services_per_host,
              "startup_s": args.startup, "router_startup_s": args.router_startup, "runs": args.runs,
              "collector": args.collector})
        return
    figures = one_size(args)
    emit({"machine": info, "quick": args.quick, **figures,
          "target": {"bringup_overhead_s": 1.0, "met": figures["bringup_overhead_s"] <= 1.0}})


if __name__ == "__main__":
    main()
