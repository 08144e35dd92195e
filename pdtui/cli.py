# PYTHON_ARGCOMPLETE_OK
"""The command line: bare ``pdtui``, ``up``, ``status``, ``restart``, ``down``, ``demo``, ``check``, ``units``,
``init``, ``history``, ``report``, ``schema``, ``completion``.

Exit codes: 0 all ready (``down``: all stopped); 1 failed, timed out or not
ready; 2 usage or config error; 130 interrupted. Quitting never stops a
service; only ``down`` (and the TUI's stop, confirmed) does. The demo stops the
simulated deployment it made.

Here the parser, the config read and the dispatch; each subcommand's work lives in pdtui/commands/, TAB completion
in pdtui/commands/completion.py (the marker above tells argcomplete's global completion that pdtui answers a TAB).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pdtui import __version__
from pdtui.commands.completion import SHELLS, complete, shell_script
from pdtui.commands.targets import ROLE_WORDS, config_among
from pdtui.support.exits import EXIT_INTERRUPTED, EXIT_USAGE, usage_error

if TYPE_CHECKING:
    from pdtui.config import Deployment


class _Intermixed(argparse.ArgumentParser):
    """A command's parser that takes its options before, between and after its positionals alike
    (``pdtui restart deploy.yaml --rolling decodes`` as ``pdtui restart --rolling decodes deploy.yaml``): argparse's
    own intermixed parsing, which it offers for a parser without subcommands, as each command's is."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixing:      # argparse's intermixed parsing is two passes of the plain one
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def _parser(*, demo_options: bool = True) -> argparse.ArgumentParser:
    """The command line; ``demo_options``: with ``demo``'s own options, which come from the sim (only ``pdtui demo``
    loads it)."""
    from pdtui.web.options import add_options as web
    parser = argparse.ArgumentParser(prog="pdtui", description="Bring up prefill/decode disaggregated SGLang "
                                     "serving (prefill + decode + router) and watch it happen.")
    parser.add_argument("--version", action="version", version=f"pdtui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Intermixed)

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

    schema = sub.add_parser("schema", help="print the JSON Schema of a config, for editors (YAML language servers)")
    schema.add_argument("--path", action="store_true", help="print where the schema file installed with pdtui is")

    completion = sub.add_parser("completion", help="print the script that makes TAB complete pdtui's commands, options, "
                                                   "config files and service names in SHELL")
    completion.add_argument("shell", metavar="SHELL", choices=SHELLS, help=f"one of {', '.join(SHELLS)}")
    return parser


def _demo_options(demo: argparse.ArgumentParser) -> None:
    from pdtui.sim.demo_command import add_options
    add_options(demo)


def main(argv: list[str] | None = None) -> int:
    complete(lambda demo: _parser(demo_options=demo))    # the shell asking for a TAB's completions: answered, exits
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["status", *argv]    # bare pdtui (options alone too): watch the deployment found where pdtui looks
    args = _parser(demo_options=argv[:1] == ["demo"]).parse_args(argv)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "up": _up, "status": _status, "restart": _restart, "down": _down, "demo": _demo, "check": _check,
        "units": _units, "init": _init, "history": _history, "report": _report, "schema": _schema,
        "completion": _completion}
    if getattr(args, "theme", None):
        from pdtui.config import ConfigError
        from pdtui.ui.themes import available_themes, read_theme
        if args.theme not in available_themes():
            return usage_error(f"unknown theme {args.theme!r}; available: {', '.join(available_themes())}")
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
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """The reader of stdout went away (``pdtui check CONFIG | head``): end quietly, as ``cat`` does, not with a
    traceback; stdout is pointed at /dev/null so that Python's own flush at exit does not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


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


def _completion(args: argparse.Namespace) -> int:
    sys.stdout.write(shell_script(args.shell))
    return 0


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _load(path: str, *, named: bool = True):
    """The deployment of the config at ``path``, or None after one line saying why not. A config ``named`` on the
    command line is the user's choice: one that pdtui would refuse to find by itself is loaded after a warning
    saying why (config/trust.py)."""
    from pdtui.config import ConfigError, load_config
    from pdtui.config.trust import distrust
    from pdtui.support.text import inert
    from pdtui.targets import PLACEMENTS
    if named and (why := distrust(path)):
        print(f"pdtui: warning: using {inert(path)} as named, though {why}", file=sys.stderr)
    try:
        return load_config(path, PLACEMENTS)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return None


def _check(args: argparse.Namespace) -> int:
    from pdtui.commands.probe import check
    deployment = _load(args.config)
    if deployment is None:
        return EXIT_USAGE
    return check(deployment, args)


def _units(args: argparse.Namespace) -> int:
    from pdtui.commands import units_command as units
    from pdtui.commands.bring_up import host_factory_for
    deployment = _load(args.config)
    if deployment is None:
        return EXIT_USAGE
    if args.yes and not args.install:
        return usage_error("--yes goes with --install")
    return units.run(deployment, out=args.out, diff_them=args.diff, install_them=args.install, yes=args.yes,
                     factory=host_factory_for(args))


def _init(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pdtui.commands import init
    return init.run(Path(args.path))


def _schema(args: argparse.Namespace) -> int:
    """``pdtui schema``: the config's JSON Schema on stdout, made from the models now; ``--path``: the file of it
    installed with pdtui, which an editor's settings can name."""
    from pdtui.config.json_schema import schema_text, shipped_schema
    from pdtui.support.exits import EXIT_FAILED, EXIT_OK
    from pdtui.targets import PLACEMENTS
    if not args.path:
        sys.stdout.write(schema_text(PLACEMENTS))
        return EXIT_OK
    path = shipped_schema()
    if not path.is_file():
        print(f"pdtui: no schema file at {path} (an installation without its data files?): "
              "`pdtui schema > pdtui.schema.json` writes one", file=sys.stderr)
        return EXIT_FAILED
    print(path)
    return EXIT_OK


def _up(args: argparse.Namespace) -> int:
    from pdtui.commands import verbs
    deployment = _load(args.config)
    if deployment is None:
        return EXIT_USAGE
    return verbs.up(deployment, args)


def _found_config(given: str | None, verb: str) -> str | None:
    """CONFIG as given, else the one bare ``pdtui`` finds; None (after one line saying where it looked, or why the one
    found is not used) when there is none to use. A config found, not named, is used only when nobody but the caller
    and root could have put it there (config/trust.py): its ``commands:`` run as the caller."""
    import shlex
    from pathlib import Path

    from pdtui.config.discovery import find_config, not_found_message
    from pdtui.config.trust import distrust
    from pdtui.support.text import inert
    if given:
        return given
    found, looked = find_config(os.environ, Path.cwd())
    if found is None:
        print(not_found_message(looked, os.environ), file=sys.stderr)
        return None
    if why := distrust(found):
        how = f"pdtui {verb} {shlex.quote(inert(str(found)))}{' SERVICE' if verb == 'restart' else ''}"
        print(f"pdtui: not using the config found at {inert(str(found))}: {why}; if you trust it, name it: {how}",
              file=sys.stderr)
        return None
    return str(found)


def _status(args: argparse.Namespace) -> int:
    from pdtui.commands import verbs
    from pdtui.web.options import web_options
    web = web_options(args)
    if isinstance(web, str):
        return usage_error(web)
    path = _found_config(args.config, "status")
    deployment = _load(path, named=bool(args.config)) if path else None
    if deployment is None:
        return EXIT_USAGE
    assert path is not None
    return verbs.status(deployment, path, args, web)


def _restart(args: argparse.Namespace) -> int:
    from pdtui.commands import verbs
    from pdtui.config import parse_duration
    found = _config_and_services("restart", args.targets)
    if isinstance(found, int):
        return found
    deployment, targets = found
    if not targets:
        return usage_error(f"restart: name the services to restart (of {', '.join(deployment.services)})")
    try:
        drain_timeout = parse_duration(args.drain_timeout)
    except ValueError as exc:
        return usage_error(f"--drain-timeout: {exc}")
    return verbs.restart(deployment, targets, args, drain_timeout)


def _config_and_services(verb: str, given: list[str]) -> tuple[Deployment, list[str]] | int:
    """``[CONFIG] SERVICE...`` read: the deployment and the services named (a role word stands for its services),
    or the exit status after one line saying what is wrong."""
    targets = list(given)
    at = config_among(targets)
    config = targets.pop(at) if at is not None else None
    path = _found_config(config, verb)
    deployment = _load(path, named=config is not None) if path else None
    if deployment is None:
        return EXIT_USAGE
    targets = [name for target in targets for name in _services_named(deployment, target)]
    unknown = [t for t in targets if t not in deployment.services]
    if unknown:
        return usage_error(f"{verb}: no service {unknown[0]!r} in {path}; services: {', '.join(deployment.services)}")
    return deployment, list(dict.fromkeys(targets))


def _services_named(deployment: Deployment, target: str) -> list[str]:
    """A service's name, or a role's word (``decodes``: every decode, in the config's order)."""
    if target in deployment.services or target not in ROLE_WORDS:
        return [target]
    return [name for name, cfg in deployment.services.items() if cfg.role == ROLE_WORDS[target]]


def _down(args: argparse.Namespace) -> int:
    from pdtui.commands import verbs
    from pdtui.config import parse_duration
    try:
        stop_timeout = parse_duration(args.timeout)
    except ValueError as exc:
        return usage_error(f"--timeout: {exc}")
    try:
        drain_timeout = parse_duration(args.drain_timeout)
    except ValueError as exc:
        return usage_error(f"--drain-timeout: {exc}")
    found = _config_and_services("down", args.targets)
    if isinstance(found, int):
        return found
    deployment, services = found
    return verbs.down(deployment, services, args, stop_timeout, drain_timeout)


def _demo(args: argparse.Namespace) -> int:
    from pdtui.sim.demo_command import run
    return run(args)
