"""The run every deployment command shares: an orchestrator for the intent, in the TUI or headless, recorded in the
run history; ``status --once``'s table; the hosts reached as the command line says."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pdtui.commands.probe import probing
from pdtui.support.exits import EXIT_INTERRUPTED
from pdtui.support.text import inert


def host_factory_for(args: argparse.Namespace):
    """How the engine reaches each host: SSH trusting unknown host keys only with ``--accept-new``."""
    from pdtui.hosts import make_host

    def factory(cfg, on_status=None):
        return make_host(cfg, accept_new=args.accept_new, on_status=on_status)

    return factory


def bring_up(deployment, host_factory, args: argparse.Namespace, follow_up: str = "", intent=None,
             timing=None) -> int:
    """Run the intent (by default a bring-up) in the TUI, or headless with ``--headless``/``--json``."""
    from pdtui.engine.intent import Intent, Verb
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.engine.timing import DEFAULT_TIMING
    from pdtui.faces.run_history import HistoryRecorder, history_path, last_ready
    from pdtui.targets.registry import Registry
    intent = intent or Intent(force=args.force)
    # what this bring-up's phases are compared with: read before it records itself
    baseline = last_ready(history_path(), deployment.name) if intent.verb in (Verb.UP, Verb.RESTART) else {}
    orchestrator = Orchestrator(deployment, Registry(host_factory), **probing(args), intent=intent,
                                timing=timing or DEFAULT_TIMING, baseline=baseline)
    recorder = HistoryRecorder(history_path())
    orchestrator.subscribe(recorder)
    if args.headless or args.json:
        code = headless(orchestrator, args, baseline)
    else:
        from pdtui.ui.app import run_app
        from pdtui.web.options import refusal
        served = getattr(args, "served", None)     # a browser session's process: its stdout is the web protocol
        code = run_app(orchestrator, theme=args.theme, follow_up_text=follow_up, refuse_actions=refusal(served),
                       summary=not served, baseline=baseline)
    if code == EXIT_INTERRUPTED:
        recorder.interrupted(code)
    if recorder.error:
        print(f"pdtui: the run history could not be written ({inert(recorder.error)}); the bring-up is unaffected",
              file=sys.stderr)
    return code


def headless(orchestrator, args: argparse.Namespace, baseline=None) -> int:
    """The run printed one line (or one JSON object) per step and state change; Ctrl-C prints what was left."""
    from pdtui.faces.headless import InterruptSummary, JsonPrinter, LinePrinter, UntilDone
    from pdtui.support.heap import QuietCollector
    printer = JsonPrinter(logs=args.logs) if args.json else LinePrinter(logs=args.logs, baseline=baseline)
    summary = InterruptSummary()
    orchestrator.subscribe(UntilDone(printer))
    orchestrator.subscribe(summary)

    async def run() -> int:
        try:
            done = await orchestrator.run()
            return done.exit_code
        finally:
            await orchestrator.close()

    collector = QuietCollector()
    collector.start()
    collector.settle()           # the deployment and the engine's objects live as long as the bring-up
    try:
        return asyncio.run(run())
    except KeyboardInterrupt:
        left = orchestrator.left_running()
        if args.json:
            print(summary.json(left), flush=True)
        else:
            print(f"pdtui: {summary.text(left)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        collector.restore()


def once(deployment, host_factory, args: argparse.Namespace, intent) -> int:
    """``status --once``: judge every service, print the table (or the JSON object), exit 0 only when all are ready."""
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.faces.status_table import StatusBoard
    from pdtui.targets.registry import Registry
    orchestrator = Orchestrator(deployment, Registry(host_factory), **probing(args), intent=intent)
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


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Ignore SIGINT, SIGTERM and SIGHUP for the duration (cleanup that must run to its end)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
