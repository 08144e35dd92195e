"""``pdtui demo``: a simulated deployment brought up on this machine (in a sandbox, or as jobs on a private Slurm
cluster), watched like a real one, and stopped when the demo ends.

It lives in the sim, beside the stand-ins it wires (systemd, SGLang, Slurm, SSH): the command line imports it
only for ``pdtui demo``, and no product module imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pdtui.commands.bring_up import bring_up, signals_ignored
from pdtui.support.exits import usage_error

if TYPE_CHECKING:
    from pdtui.engine.orchestrator import Orchestrator

STARTUP = 6.0      # seconds the simulated backends take to get ready, by default
TIMEOUT = "2m"      # each service's, by default
REAL_TIMEOUT = "5m"     # with --real: a real SGLang, its venv just installed, on a busy machine, said nothing for 78 s


def add_options(demo: argparse.ArgumentParser) -> None:
    """``demo``'s own options, whose choices come from the sim."""
    from pdtui.sim.command_lines import ROUTERS
    from pdtui.sim.knobs import DEFAULT_GENERATION, DEMO_FAIL_MODES, FABRIC_FAIL_MODES, FAIL_MODES, GENERATIONS, SHAPES
    demo.add_argument("--fail", action="append", default=[], metavar="SERVICE:MODE",
                      help=f"inject a failure, e.g. decode:oom (modes: {', '.join([*FAIL_MODES, *DEMO_FAIL_MODES])}; "
                           "broken-pair, a decode's: it cannot reach the first prefill's bootstrap server, so the "
                           "requests through that pair fail; with --slurm also pending: its job waits in the queue); "
                           f"or fabric:MODE, the host's RDMA fabric broken ({', '.join(FABRIC_FAIL_MODES)})")
    demo.add_argument("--shape", choices=SHAPES, default=SHAPES[0],
                      help="how many prefills and decodes share the eight simulated GPUs: 1p1d (the reference "
                           "deployment: prefill, decode), 1p2d (prefill, decode-0, decode-1) or 2p2d (prefill-0, "
                           f"prefill-1, decode-0, decode-1); default {SHAPES[0]}")
    demo.add_argument("--nodes", type=int, default=1, metavar="N",
                      help="the decode spans N simulated machines (gpu0, gpu1, ...; 2 to 4), one server of N ranks, "
                           "as the field's large deployments run: --fail decode@1:MODE breaks its rank 1; with "
                           "--slurm, one job over N nodes of the private cluster")
    demo.add_argument("--engine", choices=("sglang", "vllm"), default="sglang",
                      help="the serving engine the simulated workers play: sglang (default), or vllm: vLLM's servers "
                           "with NIXL between them and the real vllm-router in front (pip install vllm-router); "
                           "its --fail modes: block-size, kv-memory, hang, crash-after-ready, side-channel (both "
                           "servers given one NIXL side-channel port: refused before start)")
    demo.add_argument("--slurm", action="store_true",
                      help="run the three as jobs on a private one-node Slurm cluster of this machine, gone when the "
                           "demo ends (root and Debian's slurmctld, slurmd, slurm-client and munge)")
    demo.add_argument("--generation", choices=GENERATIONS, default=None,
                      help="which SGLang release's log wording and /health behaviour the simulated "
                           f"workers play (default {DEFAULT_GENERATION})")
    demo.add_argument("--startup", type=float, default=None, metavar="SECONDS",
                      help=f"how long the simulated backends take to get ready (default {STARTUP:g})")
    demo.add_argument("--real", action="store_true",
                      help="real SGLang on this machine's CPU in place of the simulated workers, serving a tiny "
                           "model made here (its own venv: python -m pdtui.sim.real_sglang install), the demo in "
                           "a network namespace of its own; with --engine vllm, real vLLM (python -m "
                           "pdtui.sim.real_vllm install)")
    demo.add_argument("--timeout", default=None,
                      help=f"per-service timeout (default {TIMEOUT}; {REAL_TIMEOUT} with --real: a real server's "
                           "first start after its install can take minutes)")
    demo.add_argument("--router", choices=ROUTERS, default=None,
                      help="the router to run: smg, sglang-router (either must be installed) or sim, "
                           "pdtui's stand-in (default: smg if installed, else sglang-router, else sim)")
    demo.add_argument("--no-load", action="store_true",
                      help="send no traffic through the router (by default a light load runs from the start, "
                           "so the serving figures move)")
    # Hidden (for tests and debugging; see docs/reliability.md): make the sandbox in DIR and keep it
    # after exit (its processes are still stopped), so its state files and journal can be inspected.
    demo.add_argument("--sandbox", metavar="DIR", default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """The demo: build the simulated deployment, bring it up, stop it (and remove its sandbox) however it ends."""
    from pdtui.config import ConfigError, parse_duration
    from pdtui.hosts import make_host
    from pdtui.sim import demo
    from pdtui.sim.command_lines import router_label
    from pdtui.sim.sandbox import Sandbox
    from pdtui.web.options import web_options
    if args.slurm and args.shape != demo.REFERENCE_SHAPE:
        return usage_error(f"demo --slurm runs the {demo.REFERENCE_SHAPE} shape only (one prefill job, one decode "
                           f"job); --shape {args.shape} runs without --slurm")
    wide = nodes_error(args) or engine_error(args)
    if wide:
        return usage_error(wide)
    try:
        failures = dict(demo.parse_failure(f, slurm=args.slurm, shape=args.shape, nodes=args.nodes, engine=args.engine)
                        for f in args.fail)
        timeout = args.timeout or (REAL_TIMEOUT if args.real else TIMEOUT)
        parse_duration(timeout)
        router = "vllm-router" if args.engine == demo.VLLM else router_for(args.router)
        reference_ports = demo.reference_ports_wanted(os.environ)
    except ValueError as exc:
        return usage_error(str(exc))
    web = web_options(args)
    if isinstance(web, str):
        return usage_error(web)
    if args.slurm and (args.web or args.sandbox):
        return usage_error("demo --slurm runs in the terminal or headless (no --web, no --sandbox)")
    real = real_model(args) if args.real else None     # the last check: it makes the model and leaves the network
    if isinstance(real, int):
        return real
    if not args.json:
        print(f"pdtui demo: the router is {router_label(router)}", file=sys.stderr)
    options = demo.DemoOptions(failures, STARTUP if args.startup is None else args.startup, timeout,
                               router=router, generation=args.generation or demo.DEFAULT_GENERATION,
                               reference_ports=reference_ports, shape=args.shape, real=real, nodes=args.nodes,
                               engine=args.engine)
    if args.slurm:
        return run_on_slurm(args, options)
    sandbox = Sandbox.create(args.sandbox)
    if not args.json:
        print(f"pdtui demo: the journal is {sandbox.journal_kind}", file=sys.stderr)
    try:
        deployment = demo.build(sandbox, options)
        if not args.no_load:
            demo.start_load(sandbox, deployment)     # stopped with the units, below
            if not args.json:
                print(f"pdtui demo: a light load runs through the router (its log: {sandbox.root / 'load.log'}; "
                      f"--no-load: none)", file=sys.stderr)
        if args.web:
            from pdtui.web.run import serve_demo
            code = serve_demo(deployment, sandbox.root / "demo.yaml", args, web, web_bring_up(deployment, args))
        else:
            code = bring_up(deployment, make_host, args, follow_up="the demo stops its simulated deployment on exit")
    except ConfigError as exc:
        code = usage_error(str(exc))
    finally:
        with signals_ignored():   # a second Ctrl-C must not leave half the deployment running
            if args.sandbox:
                sandbox.stop_all()
            else:
                sandbox.cleanup()
    if not args.json:
        kept = f"; kept its sandbox {sandbox.root}" if args.sandbox else " and removed its sandbox"
        print(f"pdtui demo: stopped the {'demo' if args.real else 'simulated'} deployment{kept}", file=sys.stderr)
    return code


def web_bring_up(deployment, args: argparse.Namespace) -> Callable[[], Orchestrator]:
    """What ``demo --web`` brings up once, composed here (the probe the options ask for, the targets the demo's
    services run on) and handed to the web face, which imports neither the commands nor the targets."""
    from pdtui.commands.probe import probing
    from pdtui.engine.intent import Intent
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.hosts import make_host
    from pdtui.targets.registry import Registry
    return lambda: Orchestrator(deployment, Registry(make_host), **probing(args), intent=Intent(force=args.force))


def nodes_error(args: argparse.Namespace) -> str | None:
    """What ``--nodes`` cannot be combined with, in one line (None: nothing)."""
    from pdtui.sim import demo
    if args.nodes == 1:
        return None
    if not 2 <= args.nodes <= demo.MAX_NODES:
        return f"demo --nodes expects 2 to {demo.MAX_NODES} (the decode's machines), got {args.nodes}"
    others = [flag for flag, given in (("--real", args.real),
                                       (f"--shape {args.shape}", args.shape != demo.REFERENCE_SHAPE)) if given]
    if others:
        return f"demo --nodes runs the simulated {demo.REFERENCE_SHAPE} shape: not with {', '.join(others)}"
    return None


def engine_error(args: argparse.Namespace) -> str | None:
    """What ``--engine vllm`` cannot be combined with, or lacks, in one line (None: nothing)."""
    import importlib.util

    from pdtui.sim import demo
    if args.engine != demo.VLLM:
        return None
    others = [flag for flag, given in (("--slurm", args.slurm), ("--nodes", args.nodes > 1),
                                       ("--generation", args.generation), ("--router", args.router)) if given]
    if others:
        return f"demo --engine vllm runs simulated vLLM servers behind vllm-router: not with {', '.join(others)}"
    if importlib.util.find_spec("vllm_router") is None:
        return "demo --engine vllm: vllm-router is not installed here (pip install vllm-router, or pdtui[router])"
    return None


def real_model(args: argparse.Namespace) -> str | int:
    """``--real``: the tiny model's path once the real engine (SGLang, or vLLM with ``--engine vllm``) can run and
    this process is in a network of its own; else the exit status after one line saying why."""
    from pdtui.sim import demo, real_sglang, real_vllm
    engine = real_vllm if args.engine == demo.VLLM else real_sglang
    label = "vLLM" if engine is real_vllm else "SGLang"
    sim_only = [flag for flag, given in (("--slurm", args.slurm), ("--fail", args.fail), ("--web", args.web),
                                         ("--generation", args.generation), ("--startup", args.startup is not None))
                if given]
    if sim_only:
        return usage_error(f"demo --real runs real {label} in the terminal or headless: {', '.join(sim_only)} "
                           f"belong to the simulated demo")
    missing = engine.missing_reason()
    if missing:
        return usage_error(f"demo --real: {missing}")
    if not args.json:
        print(f"pdtui demo: making the tiny model real {label} serves (once)", file=sys.stderr)
    try:
        model = engine.make_model(real_sglang.models_folder(), real_sglang.corpus())
    except RuntimeError as exc:
        return usage_error(f"demo --real: {exc}")
    why = real_sglang.private_network()
    if why:
        listeners = "UCX" if engine is real_vllm else "the torch store and Mooncake"
        return usage_error(f"demo --real: {why} (real {label}'s {listeners} would listen on every address of "
                           f"this machine)")
    return str(model)


def run_on_slurm(args: argparse.Namespace, options) -> int:
    """The demo as Slurm jobs on a private one-node cluster, stopped (its jobs, its daemons) when the demo ends."""
    from pdtui.hosts import make_host
    from pdtui.sim import demo
    from pdtui.sim.slurm_cluster import ClusterError, ClusterUnavailable, PrivateCluster
    try:
        cluster = PrivateCluster.start(nodes=options.nodes)
    except (ClusterUnavailable, ClusterError) as exc:
        return usage_error(f"demo --slurm: {exc}")
    try:
        if not args.json:
            print(f"pdtui demo: a private Slurm cluster runs the jobs (node {', '.join(cluster.nodes)}, {cluster.gpus} GPUs, "
                  f"in {cluster.root})", file=sys.stderr)
        deployment = demo.build_slurm(cluster, options)
        code = bring_up(deployment, make_host, args,
                        follow_up="the demo cancels its jobs and stops its Slurm cluster on exit")
    finally:
        with signals_ignored():
            cluster.stop()
    if not args.json:
        print("pdtui demo: cancelled its jobs and stopped its private Slurm cluster", file=sys.stderr)
    return code


def router_for(asked: str | None) -> str:
    """The router the demo runs: the one asked for, which must be installed, or the default."""
    from pdtui.sim.command_lines import SIM_ROUTER, default_router, installed_routers
    installed = installed_routers()
    if asked in (None, SIM_ROUTER) or asked in installed:
        return asked or default_router()
    raise ValueError(f"--router {asked}: the {asked} package is not installed here (pip install {asked}); "
                     f"installed: {', '.join([*installed, SIM_ROUTER])}")
