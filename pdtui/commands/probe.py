"""What the router's probe sends (the face options' smoke, canary and pairs), and ``pdtui check``: the plan, and
with ``--probe`` the preflight alone."""

from __future__ import annotations

import argparse
import asyncio
from typing import TypedDict

from pdtui.support.exits import EXIT_FAILED, EXIT_OK


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


def check(deployment, args: argparse.Namespace) -> int:
    """``pdtui check``: the plan printed; with ``--probe``, then the preflight on every host."""
    from pdtui.commands.bring_up import host_factory_for
    from pdtui.faces.plan import render_plan
    print(render_plan(deployment))
    if not args.probe:
        return EXIT_OK
    return preflight(deployment, host_factory_for(args))


def preflight(deployment, host_factory) -> int:
    """The preflight alone, printed as the headless bring-up prints it."""
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.faces.headless import LinePrinter
    from pdtui.targets.registry import Registry

    orchestrator = Orchestrator(deployment, Registry(host_factory))
    orchestrator.subscribe(LinePrinter())

    async def run() -> bool:
        try:
            return await orchestrator.preflight()
        finally:
            await orchestrator.close()

    print()
    ok = asyncio.run(run())
    print("preflight passed" if ok else "preflight failed")
    return EXIT_OK if ok else EXIT_FAILED
