"""``up``, ``status``, ``restart`` and ``down``: each the intent its options ask for, run by the one bring-up
(commands/bring_up.py) on the deployment and services the command line named."""

from __future__ import annotations

import argparse
import dataclasses

from pdtui.commands.bring_up import bring_up, host_factory_for, once


def up(deployment, args: argparse.Namespace) -> int:
    """``pdtui up``: bring the deployment up, attaching to running units unless ``--restart``."""
    from pdtui.engine.intent import Intent
    return bring_up(deployment, host_factory_for(args), args, intent=Intent(fresh=args.restart, force=args.force))


def status(deployment, config: str, args: argparse.Namespace, web) -> int:
    """``pdtui status``: watch the deployment (in the TUI, headless, served with ``--web``, or ``--once``)."""
    from pdtui.engine.intent import Intent, Verb
    if args.web:
        from pdtui.web.run import serve_status
        return serve_status(deployment, config, args, web)
    intent = Intent(Verb.STATUS)
    if args.once:
        return once(deployment, host_factory_for(args), args, intent)
    return bring_up(deployment, host_factory_for(args), args, intent=intent)


def restart(deployment, services: list[str], args: argparse.Namespace, drain_timeout: float) -> int:
    """``pdtui restart``: restart the services and prove what comes after them again."""
    from pdtui.engine.intent import Intent, Verb
    intent = Intent(Verb.RESTART, tuple(dict.fromkeys(services)), with_dependents=args.with_dependents,
                    drain=not args.no_drain, drain_timeout=drain_timeout, rolling=args.rolling, force=args.force)
    return bring_up(deployment, host_factory_for(args), args, intent=intent)


def down(deployment, services: list[str], args: argparse.Namespace, stop_timeout: float, drain_timeout: float) -> int:
    """``pdtui down``: stop the services named (every one when none is), the router first."""
    from pdtui.engine.intent import Intent, Verb
    from pdtui.engine.timing import DEFAULT_TIMING
    timing = dataclasses.replace(DEFAULT_TIMING, stop_timeout=stop_timeout)
    intent = Intent(Verb.DOWN, tuple(services), disable=args.disable, drain=not args.no_drain, drain_timeout=drain_timeout)
    return bring_up(deployment, host_factory_for(args), args, intent=intent, timing=timing)
