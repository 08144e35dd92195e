"""The ``--web`` options on the command line, what they mean together, and the command each session runs.

Light on purpose (argparse only): the command line builds its parser from here on
every run, with or without ``--web``.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"
WATCH, ACT = "watch", "act"
"""The two modes a served session runs in: ``act`` only for a browser that brought the token."""

REFUSED = "this page only watches (serve it with --allow-actions and open the printed URL, with its token, to act)"


@dataclass(frozen=True)
class WebOptions:
    """Where to listen, and whether a browser with the token may act."""

    host: str = LOOPBACK
    port: int = 0                 # 0: a free port the OS picks when the server binds
    allow_actions: bool = False

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the server."""
        return is_loopback(self.host)


def add_options(parser: argparse.ArgumentParser) -> None:
    """The ``--web`` group of a subcommand that shows the TUI (``status``, ``demo``)."""
    group = parser.add_argument_group("web", "serve the TUI to browsers (textual-serve), one app process per session")
    group.add_argument("--web", action="store_true", help="serve the TUI on http://HOST:PORT instead of the terminal")
    group.add_argument("--port", type=int, default=None, help="with --web: the port (default: a free one, printed)")
    group.add_argument("--host", default=None,
                       help=f"with --web: the address to listen on (default {LOOPBACK}); anyone who reaches it sees the deployment")
    group.add_argument("--allow-actions", action="store_true",
                       help="with --web: a browser that opens the printed URL with its token may restart, stop and retry")
    # Hidden: what the server gives each session's process (watch, or act for a browser with the token).
    group.add_argument("--served", choices=(WATCH, ACT), default=None, help=argparse.SUPPRESS)


def web_options(args: argparse.Namespace) -> WebOptions | str:
    """The options asked for, or the one line saying what is wrong with them."""
    given = [flag for flag, value in (("--port", args.port), ("--host", args.host),
                                      ("--allow-actions", args.allow_actions)) if value not in (None, False)]
    if not args.web:
        return f"{given[0]} goes with --web" if given else WebOptions()
    clashing = [flag for flag in ("headless", "json", "once") if getattr(args, flag, False)]
    if clashing:
        return f"--web serves the TUI: it does not go with --{clashing[0]}"
    if args.served:
        return "--served is given by the web server to its sessions, not with --web"
    if args.port is not None and not 0 <= args.port <= 65535:
        return f"--port {args.port}: a port is 0 to 65535 (0: a free one)"
    host = (args.host if args.host is not None else LOOPBACK).strip()
    if not host:
        return "--host: give an address or host name to listen on"
    return WebOptions(host, args.port or 0, args.allow_actions)


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refusal(served: str | None) -> str:
    """What a session says when asked to act: empty when it may (the terminal, or a browser with the token)."""
    return REFUSED if served == WATCH else ""


def session_command(config: str, args: argparse.Namespace, mode: str) -> list[str]:
    """The argv each browser session runs: ``pdtui status CONFIG`` attached read-only, in ``mode``.

    ``status`` judges and watches without starting anything; the server picks
    ``mode`` per session, so a browser without the token cannot ask for ``act``.
    """
    argv = [sys.executable, "-m", "pdtui", "status", config, "--served", mode, "--theme", args.theme]
    if args.no_smoke:
        argv.append("--no-smoke")
    if args.no_canary:
        argv.append("--no-canary")
    if getattr(args, "accept_new", False):
        argv.append("--accept-new")
    return argv
