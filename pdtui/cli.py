"""The command line: bare ``pdtui``, ``up``, ``status``, ``restart``, ``down``, ``demo``, ``check``, ``units``.

Exit codes: 0 all ready (``down``: all stopped); 1 failed, timed out or not
ready; 2 usage or config error; 130 interrupted. Quitting never stops a
service; only ``down`` (and the TUI's stop, confirmed) does. The demo stops the
simulated deployment it made.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypedDict

from pdtui import __version__
from pdtui.support.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from pdtui.config import Deployment


def _parser(*, demo_options: bool = True) -> argparse.ArgumentParser:
    """The command line; ``demo_options``: with ``demo``'s own options, which come from the sim (only ``pdtui demo``
    loads it)."""
    from pdtui.web.options import add_options as web
    parser = argparse.ArgumentParser(prog="pdtui", description="Bring up prefill/decode disaggregated SGLang "
                                     "serving (prefill + decode + router) and watch it happen.")
    parser.add_argument("--version", action="version", version=f"pdtui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def force(p: argparse.ArgumentParser) -> None:
        p.add_argument("--force", action="store_true",
                       help="start despite the preflight's refusals of the servers as they will run (a prefill and a "
                            "decode that disagree, ports that collide), saying what it overrode")

    def face(p: argparse.ArgumentParser, *, watching: bool = False) -> None:
        p.add_argument("--headless", action="store_true", help="print one line per step and state change")
        p.add_argument("--json", action="store_true", help="print one JSON object per event (implies --headless)")
        p.add_argument("--logs", action="store_true", help="headless: print journal lines too")
        p.add_argument("--no-smoke", action="store_true", help="skip the test generation through the router")
        p.add_argument("--no-canary", action="store_true",
                       help="after ready, send no canary generations through the router (default: its canary interval)")
        p.add_argument("--theme", default="dark", help="TUI theme (dark, light, ...)")
        if watching:
            p.add_argument("--pairs", action="store_true", help="prove every prefill × decode pair directly, "
                                                                 "bypassing the router (one request each)")
        else:
            p.add_argument("--no-pairs", action="store_true", help="do not prove each prefill × decode pair "
                                                                    "directly (default: when there are several)")

    up = sub.add_parser("up", help="bring up the deployment of CONFIG")
    up.add_argument("config", metavar="CONFIG")
    up.add_argument("--restart", action="store_true", help="restart units that are running already (default: attach)")
    up.add_argument("--accept-new", action="store_true", help="trust unknown SSH host keys and remember them")
    face(up)
    force(up)

    status = sub.add_parser("status", help="watch the deployment: judge every service as it runs; commands nothing")
    status.add_argument("config", metavar="CONFIG", nargs="?", help="default: the config bare pdtui finds")
    status.add_argument("--once", action="store_true", help="print a table (with --json one JSON object) and exit: "
                                                            "0 when every service is ready, 1 otherwise")
    status.add_argument("--accept-new", action="store_true", help="trust unknown SSH host keys and remember them")
    face(status, watching=True)
    web(status)

    restart = sub.add_parser("restart", help="restart SERVICEs and prove what comes after them (the router) again")
    restart.add_argument("targets", metavar="[CONFIG] SERVICE", nargs="+")
    restart.add_argument("--with-dependents", action="store_true",
                         help="also restart what comes after them (for a prefill: the decodes beside it, too; with "
                              "--rolling, a prefill's decodes restart in turn after it, before it goes back in)")
    restart.add_argument("--no-drain", action="store_true",
                         help="restart a backend under serving routers as it is (by default it is taken out of them "
                              "first, drained, and put back once proven: the routers keep serving)")
    restart.add_argument("--rolling", action="store_true",
                         help="one at a time: each drained, restarted, proven and back before the next; SERVICE may "
                              "be a role: prefills, decodes")
    restart.add_argument("--drain-timeout", default="2m",
                         help="how long a drained backend may take to finish its requests (default 2m)")
    restart.add_argument("--accept-new", action="store_true", help="trust unknown SSH host keys and remember them")
    face(restart)
    force(restart)

    down = sub.add_parser("down", help="stop the deployment: the router first, then the backends and their GPUs; or "
                                       "only the SERVICEs named, each backend drained out of its routers first")
    down.add_argument("targets", metavar="[CONFIG] [SERVICE]", nargs="*",
                      help="default: the config bare pdtui finds, every service")
    down.add_argument("--disable", action="store_true", help="also disable the units (systemctl disable --now)")
    down.add_argument("--no-drain", action="store_true",
                      help="stop a named backend as it is (by default it is taken out of its routers first)")
    down.add_argument("--drain-timeout", default="2m",
                      help="how long a drained backend may take to finish its requests (default 2m)")
    down.add_argument("--timeout", default="2m", help="per service: its stop and its GPUs' release (default 2m)")
    down.add_argument("--accept-new", action="store_true", help="trust unknown SSH host keys and remember them")
    face(down)

    demo = sub.add_parser("demo", help="bring up a simulated deployment on this machine (no GPU, SSH or systemd)")
    if demo_options:
        _demo_options(demo)
    face(demo)
    force(demo)
    web(demo)

    units = sub.add_parser("units", help="print the systemd units generated from CONFIG's launch: blocks")
    units.add_argument("config", metavar="CONFIG")
    what = units.add_mutually_exclusive_group()
    what.add_argument("--out", metavar="DIR", help="write one <unit>.service per service into DIR")
    what.add_argument("--diff", action="store_true", help="compare with the installed units (systemctl cat) on each host")
    what.add_argument("--install", action="store_true",
                      help="write them on each host (atomically, with a backup) and run systemctl daemon-reload")
    units.add_argument("--yes", action="store_true", help="with --install: replace installed units that differ")
    units.add_argument("--accept-new", action="store_true", help="trust unknown SSH host keys and remember them")

    check = sub.add_parser("check", help="validate CONFIG and print the plan; touches no host")
    check.add_argument("config", metavar="CONFIG")
    check.add_argument("--probe", action="store_true",
                       help="also reach every host and run the preflight (units, GPUs, NUMA); starts nothing")
    check.add_argument("--accept-new", action="store_true", help="trust unknown SSH host keys and remember them")

    history = sub.add_parser("history", help="list the recorded bring-ups and restarts, newest first")
    history.add_argument("config", metavar="CONFIG", nargs="?", help="only the runs of this deployment")
    history.add_argument("--json", action="store_true", help="one JSON object per run")
    history.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")

    report = sub.add_parser("report", help="one run's timeline: phases, steps and the critical path")
    report.add_argument("run", metavar="RUN", nargs="?", help="the run's number as history lists it (default: newest)")
    report.add_argument("--json", action="store_true", help="the run as one JSON object")

    init = sub.add_parser("init", help="write a commented pdtui.yaml for this machine (its GPUs and SGLang units)")
    init.add_argument("path", metavar="PATH", nargs="?", default="pdtui.yaml",
                      help="the file to write, or a folder for its pdtui.yaml (default ./pdtui.yaml); never replaces a file")
    return parser


def _demo_options(demo: argparse.ArgumentParser) -> None:
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
    demo.add_argument("--slurm", action="store_true",
                      help="run the three as jobs on a private one-node Slurm cluster of this machine, gone when the "
                           "demo ends (root and Debian's slurmctld, slurmd, slurm-client and munge)")
    demo.add_argument("--generation", choices=GENERATIONS, default=DEFAULT_GENERATION,
                      help="which SGLang release's log wording and /health behaviour the simulated "
                           f"workers play (default {DEFAULT_GENERATION})")
    demo.add_argument("--startup", type=float, default=6.0, metavar="SECONDS",
                      help="how long the simulated backends take to get ready (default 6)")
    demo.add_argument("--timeout", default="2m", help="per-service timeout (default 2m)")
    demo.add_argument("--router", choices=ROUTERS, default=None,
                      help="the router to run: smg, sglang-router (either must be installed) or sim, "
                           "pdtui's stand-in (default: smg if installed, else sglang-router, else sim)")
    demo.add_argument("--no-load", action="store_true",
                      help="send no traffic through the router (by default a light load runs from the start, "
                           "so the serving figures move)")
    # Hidden (for tests and debugging; see docs/reliability.md): make the sandbox in DIR and keep it
    # after exit (its processes are still stopped), so its state files and journal can be inspected.
    demo.add_argument("--sandbox", metavar="DIR", default=None, help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["status", *argv]    # bare pdtui (options alone too): watch the deployment found where pdtui looks
    args = _parser(demo_options=argv[:1] == ["demo"]).parse_args(argv)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "up": _up, "status": _status, "restart": _restart, "down": _down, "demo": _demo, "check": _check,
        "units": _units, "init": _init, "history": _history, "report": _report}
    if getattr(args, "theme", None):
        from pdtui.config import ConfigError
        from pdtui.ui.themes import available_themes, read_theme
        if args.theme not in available_themes():
            return _error(f"unknown theme {args.theme!r}; available: {', '.join(available_themes())}")
        try:
            if not (args.headless or args.json):   # the TUI will draw it: a broken theme file is one line now
                read_theme(args.theme)
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            return EXIT_USAGE
    # A closed terminal or tmux pane (SIGHUP) and a kill (SIGTERM) unwind like Ctrl-C: the demo stops what it started.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _history(args: argparse.Namespace) -> int:
    from pdtui.commands.history import history_command
    from pdtui.faces.run_history import history_path
    deployment = _load(args.config) if args.config else None
    if args.config and deployment is None:
        return EXIT_USAGE
    return history_command(history_path(), deployment.name if deployment else None, args.json, args.limit,
                           sys.stdout, sys.stderr)


def _report(args: argparse.Namespace) -> int:
    from pdtui.commands.history import report_command
    from pdtui.faces.run_history import history_path
    return report_command(history_path(), args.run, args.json, sys.stdout, sys.stderr)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _error(message: str) -> int:
    print(f"pdtui: {message}", file=sys.stderr)
    return EXIT_USAGE


def _load(path: str):
    from pdtui.config import ConfigError, load_config
    try:
        return load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return None


def _check(args: argparse.Namespace) -> int:
    from pdtui.faces.plan import render_plan
    deployment = _load(args.config)
    if deployment is None:
        return EXIT_USAGE
    print(render_plan(deployment))
    if not args.probe:
        return EXIT_OK
    return _probe(deployment, args)


def _units(args: argparse.Namespace) -> int:
    from pdtui.commands import units_command as units
    from pdtui.hosts import make_host
    deployment = _load(args.config)
    if deployment is None:
        return EXIT_USAGE
    if args.yes and not args.install:
        return _error("--yes goes with --install")

    def factory(cfg, on_status=None):
        return make_host(cfg, accept_new=args.accept_new, on_status=on_status)

    return units.run(deployment, out=args.out, diff_them=args.diff, install_them=args.install, yes=args.yes,
                     factory=factory)


def _init(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pdtui.commands import init
    return init.run(Path(args.path))


def _probe(deployment, args: argparse.Namespace) -> int:
    """The preflight alone, printed as the headless bring-up prints it."""
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.faces.headless import LinePrinter
    from pdtui.hosts import make_host

    def factory(cfg, on_status=None):
        return make_host(cfg, accept_new=args.accept_new, on_status=on_status)

    orchestrator = Orchestrator(deployment, factory)
    orchestrator.subscribe(LinePrinter())

    async def preflight() -> bool:
        try:
            return await orchestrator.preflight()
        finally:
            await orchestrator.close()

    print()
    ok = asyncio.run(preflight())
    print("preflight passed" if ok else "preflight failed")
    return EXIT_OK if ok else EXIT_FAILED


def _factory(args: argparse.Namespace):
    from pdtui.hosts import make_host

    def factory(cfg, on_status=None):
        return make_host(cfg, accept_new=args.accept_new, on_status=on_status)

    return factory


def _up(args: argparse.Namespace) -> int:
    from pdtui.engine.intent import Intent
    deployment = _load(args.config)
    if deployment is None:
        return EXIT_USAGE
    return _bring_up(deployment, _factory(args), args, intent=Intent(fresh=args.restart, force=args.force))


def _found_config(given: str | None) -> str | None:
    """CONFIG as given, else the one bare ``pdtui`` finds; None (after saying where it looked) when there is none."""
    from pathlib import Path

    from pdtui.config.discovery import find_config, not_found_message
    if given:
        return given
    found, looked = find_config(os.environ, Path.cwd())
    if found is None:
        print(not_found_message(looked, os.environ), file=sys.stderr)
        return None
    return str(found)


def _web(args: argparse.Namespace):
    """The ``--web`` options of ``status`` or ``demo`` (a WebOptions), or the one line saying what is wrong."""
    from pdtui.web.options import web_options
    return web_options(args)


def _status(args: argparse.Namespace) -> int:
    from pdtui.engine.intent import Intent, Verb
    web = _web(args)
    if isinstance(web, str):
        return _error(web)
    path = _found_config(args.config)
    deployment = _load(path) if path else None
    if deployment is None:
        return EXIT_USAGE
    if args.web:
        from pdtui.web.run import serve_status
        assert path is not None
        return serve_status(deployment, path, args, web)
    intent = Intent(Verb.STATUS)
    if args.once:
        return _once(deployment, _factory(args), args, intent)
    return _bring_up(deployment, _factory(args), args, intent=intent)


def _restart(args: argparse.Namespace) -> int:
    from pdtui.config import parse_duration
    from pdtui.engine.intent import Intent, Verb
    found = _config_and_services("restart", args.targets)
    if isinstance(found, int):
        return found
    deployment, targets = found
    if not targets:
        return _error(f"restart: name the services to restart (of {', '.join(deployment.services)})")
    try:
        drain_timeout = parse_duration(args.drain_timeout)
    except ValueError as exc:
        return _error(f"--drain-timeout: {exc}")
    intent = Intent(Verb.RESTART, tuple(dict.fromkeys(targets)), with_dependents=args.with_dependents,
                    drain=not args.no_drain, drain_timeout=drain_timeout, rolling=args.rolling, force=args.force)
    return _bring_up(deployment, _factory(args), args, intent=intent)


ROLE_WORDS = {"prefills": "prefill", "decodes": "decode"}


def _config_and_services(verb: str, given: list[str]) -> tuple[Deployment, list[str]] | int:
    """``[CONFIG] SERVICE...`` read: the deployment and the services named (a role word stands for its services),
    or the exit status after one line saying what is wrong."""
    targets = list(given)
    config = targets.pop(0) if targets and (targets[0].endswith((".yaml", ".yml")) or os.path.isfile(targets[0])) else None
    path = _found_config(config)
    deployment = _load(path) if path else None
    if deployment is None:
        return EXIT_USAGE
    targets = [name for target in targets for name in _services_named(deployment, target)]
    unknown = [t for t in targets if t not in deployment.services]
    if unknown:
        return _error(f"{verb}: no service {unknown[0]!r} in {path}; services: {', '.join(deployment.services)}")
    return deployment, list(dict.fromkeys(targets))


def _services_named(deployment: Deployment, target: str) -> list[str]:
    """A service's name, or a role's word (``decodes``: every decode, in the config's order)."""
    if target in deployment.services or target not in ROLE_WORDS:
        return [target]
    return [name for name, cfg in deployment.services.items() if cfg.role == ROLE_WORDS[target]]


def _down(args: argparse.Namespace) -> int:
    from pdtui.config import parse_duration
    from pdtui.engine.intent import Intent, Verb
    from pdtui.engine.timing import DEFAULT_TIMING
    try:
        stop_timeout = parse_duration(args.timeout)
    except ValueError as exc:
        return _error(f"--timeout: {exc}")
    try:
        drain_timeout = parse_duration(args.drain_timeout)
    except ValueError as exc:
        return _error(f"--drain-timeout: {exc}")
    found = _config_and_services("down", args.targets)
    if isinstance(found, int):
        return found
    deployment, services = found
    timing = dataclasses.replace(DEFAULT_TIMING, stop_timeout=stop_timeout)
    intent = Intent(Verb.DOWN, tuple(services), disable=args.disable, drain=not args.no_drain, drain_timeout=drain_timeout)
    return _bring_up(deployment, _factory(args), args, intent=intent, timing=timing)


class ProbeOptions(TypedDict):
    smoke: bool
    canary: bool
    pairs: bool | None


def probing(args: argparse.Namespace) -> ProbeOptions:
    """What the router's probe sends, from the face options: the smoke, the canary, the pairs (``status`` proves
    them when asked, the others when there are several unless told not to)."""
    pairs = True if getattr(args, "pairs", False) else False if getattr(args, "no_pairs", False) else None
    if pairs is None and args.command == "status":
        pairs = False
    return ProbeOptions(smoke=not args.no_smoke, canary=not args.no_canary, pairs=pairs)


def _once(deployment, host_factory, args: argparse.Namespace, intent) -> int:
    """``status --once``: judge every service, print the table (or the JSON object), exit 0 only when all are ready."""
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.faces.status_table import StatusBoard
    orchestrator = Orchestrator(deployment, host_factory, **probing(args), intent=intent)
    board = StatusBoard()
    orchestrator.subscribe(board)

    async def judge() -> int:
        try:
            return (await orchestrator.run()).exit_code
        finally:
            await orchestrator.close()

    code = asyncio.run(judge())
    print(board.as_json() if args.json else board.table(), flush=True)
    return code


def _demo(args: argparse.Namespace) -> int:
    from pdtui.config import ConfigError, parse_duration
    from pdtui.hosts import make_host
    from pdtui.sim import demo
    from pdtui.sim.command_lines import router_label
    from pdtui.sim.sandbox import Sandbox
    if args.slurm and args.shape != demo.REFERENCE_SHAPE:
        return _error(f"demo --slurm runs the {demo.REFERENCE_SHAPE} shape only (one prefill job, one decode job); "
                      f"--shape {args.shape} runs without --slurm")
    try:
        failures = dict(demo.parse_failure(f, slurm=args.slurm, shape=args.shape) for f in args.fail)
        parse_duration(args.timeout)
        router = _demo_router(args.router)
        reference_ports = demo.reference_ports_wanted(os.environ)
    except ValueError as exc:
        return _error(str(exc))
    web = _web(args)
    if isinstance(web, str):
        return _error(web)
    if args.slurm and (args.web or args.sandbox):
        return _error("demo --slurm runs in the terminal or headless (no --web, no --sandbox)")
    if not args.json:
        print(f"pdtui demo: the router is {router_label(router)}", file=sys.stderr)
    options = demo.DemoOptions(failures, args.startup, args.timeout, router=router, generation=args.generation,
                               reference_ports=reference_ports, shape=args.shape)
    if args.slurm:
        return _demo_slurm(args, options)
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
            code = serve_demo(deployment, sandbox.root / "demo.yaml", args, web)
        else:
            code = _bring_up(deployment, make_host, args, follow_up="the demo stops its simulated deployment on exit")
    except ConfigError as exc:
        code = _error(str(exc))
    finally:
        with _signals_ignored():   # a second Ctrl-C must not leave half the deployment running
            if args.sandbox:
                sandbox.stop_all()
            else:
                sandbox.cleanup()
    if not args.json:
        kept = f"; kept its sandbox {sandbox.root}" if args.sandbox else " and removed its sandbox"
        print(f"pdtui demo: stopped the simulated deployment{kept}", file=sys.stderr)
    return code


def _demo_slurm(args: argparse.Namespace, options) -> int:
    """The demo as Slurm jobs on a private one-node cluster, stopped (its jobs, its daemons) when the demo ends."""
    from pdtui.hosts import make_host
    from pdtui.sim import demo
    from pdtui.sim.slurm_cluster import ClusterError, ClusterUnavailable, PrivateCluster
    try:
        cluster = PrivateCluster.start()
    except (ClusterUnavailable, ClusterError) as exc:
        return _error(f"demo --slurm: {exc}")
    try:
        if not args.json:
            print(f"pdtui demo: a private Slurm cluster runs the jobs (node {cluster.node}, {cluster.gpus} GPUs, "
                  f"in {cluster.root})", file=sys.stderr)
        deployment = demo.build_slurm(cluster, options)
        code = _bring_up(deployment, make_host, args,
                         follow_up="the demo cancels its jobs and stops its Slurm cluster on exit")
    finally:
        with _signals_ignored():
            cluster.stop()
    if not args.json:
        print("pdtui demo: cancelled its jobs and stopped its private Slurm cluster", file=sys.stderr)
    return code


def _demo_router(asked: str | None) -> str:
    """The router the demo runs: the one asked for, which must be installed, or the default."""
    from pdtui.sim.command_lines import SIM_ROUTER, default_router, installed_routers
    installed = installed_routers()
    if asked in (None, SIM_ROUTER) or asked in installed:
        return asked or default_router()
    raise ValueError(f"--router {asked}: the {asked} package is not installed here (pip install {asked}); "
                     f"installed: {', '.join([*installed, SIM_ROUTER])}")


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Ignore SIGINT, SIGTERM and SIGHUP for the duration (cleanup that must run to its end)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _bring_up(deployment, host_factory, args: argparse.Namespace, follow_up: str = "", intent=None,
              timing=None) -> int:
    from pdtui.engine.intent import Intent, Verb
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.engine.timing import DEFAULT_TIMING
    from pdtui.faces.run_history import HistoryRecorder, history_path, last_ready
    intent = intent or Intent(force=args.force)
    # what this bring-up's phases are compared with: read before it records itself
    baseline = last_ready(history_path(), deployment.name) if intent.verb in (Verb.UP, Verb.RESTART) else {}
    orchestrator = Orchestrator(deployment, host_factory, **probing(args), intent=intent,
                                timing=timing or DEFAULT_TIMING, baseline=baseline)
    recorder = HistoryRecorder(history_path())
    orchestrator.subscribe(recorder)
    if args.headless or args.json:
        code = _headless(orchestrator, args, baseline)
    else:
        from pdtui.ui.app import run_app
        from pdtui.web.options import refusal
        served = getattr(args, "served", None)     # a browser session's process: its stdout is the web protocol
        code = run_app(orchestrator, theme=args.theme, follow_up_text=follow_up, refuse_actions=refusal(served),
                       summary=not served, baseline=baseline)
    if code == EXIT_INTERRUPTED:
        recorder.interrupted(code)
    if recorder.error:
        print(f"pdtui: the run history could not be written ({recorder.error}); the bring-up is unaffected",
              file=sys.stderr)
    return code


def _headless(orchestrator, args: argparse.Namespace, baseline=None) -> int:
    from pdtui.faces.headless import InterruptSummary, JsonPrinter, LinePrinter, UntilDone
    from pdtui.support.heap import QuietCollector
    printer = JsonPrinter(logs=args.logs) if args.json else LinePrinter(logs=args.logs, baseline=baseline)
    summary = InterruptSummary()
    orchestrator.subscribe(UntilDone(printer))
    orchestrator.subscribe(summary)

    async def bring_up() -> int:
        try:
            done = await orchestrator.run()
            return done.exit_code
        finally:
            await orchestrator.close()

    collector = QuietCollector()
    collector.start()
    collector.settle()           # the deployment and the engine's objects live as long as the bring-up
    try:
        return asyncio.run(bring_up())
    except KeyboardInterrupt:
        left = orchestrator.left_running()
        if args.json:
            print(summary.json(left), flush=True)
        else:
            print(f"pdtui: {summary.text(left)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        collector.restore()
