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
MAX_SESSIONS = 4
"""Sessions served at once by default: each is a ``pdtui status`` process (some 60 MB) with its own connections."""
IDLE_MINUTES = 60
"""By default a session ends after this many minutes without a key, a click or a resize from its tab (0: never)."""


@dataclass(frozen=True)
class WebOptions:
    """Where to listen, and whether a browser with the token may act."""

    host: str = LOOPBACK
    port: int = 0                 # 0: a free port the OS picks when the server binds
    allow_actions: bool = False
    max_sessions: int = MAX_SESSIONS
    idle: float = IDLE_MINUTES * 60.0   # seconds without a message from the tab before its session ends; 0: never
    cert: str | None = None       # TLS: the certificate chain (PEM) and its key; both or neither
    key: str | None = None

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the server."""
        return is_loopback(self.host)

    @property
    def tls(self) -> bool:
        """Whether the server speaks https (and wss) only."""
        return self.cert is not None


def add_options(parser: argparse.ArgumentParser) -> None:
    """The ``--web`` group of a subcommand that shows the TUI (``status``, ``demo``)."""
    group = parser.add_argument_group("web", "serve the TUI to browsers (textual-serve), one app process per session")
    group.add_argument("--web", action="store_true",
                       help="serve the TUI on http://HOST:PORT (https with --cert and --key) instead of the terminal")
    group.add_argument("--port", type=int, default=None, help="with --web: the port (default: a free one, printed)")
    group.add_argument("--host", default=None,
                       help=f"with --web: the address to listen on (default {LOOPBACK}); anyone who reaches it sees the "
                            f"deployment. Browsers must name it by an address, this name or the machine's name")
    group.add_argument("--allow-actions", action="store_true",
                       help="with --web: a browser that opens the printed URL with its token may restart, stop, retry, "
                            "prove the pairs and save logs (as downloads); the token then lives in a cookie, out of "
                            "the address bar")
    group.add_argument("--max-sessions", type=int, default=None, metavar="N",
                       help=f"with --web: browser sessions served at once, each a pdtui process (default "
                            f"{MAX_SESSIONS}); one more is refused with a line saying so")
    group.add_argument("--idle-minutes", type=float, default=None, metavar="M",
                       help=f"with --web: end a session after M minutes without a key, click or resize from its tab "
                            f"(default {IDLE_MINUTES}; 0: never); reloading the page opens a new one")
    group.add_argument("--cert", default=None, metavar="FILE",
                       help="with --web and --key: serve https with this certificate chain (PEM); without it the page, "
                            "the logs and the token cross the network in clear text")
    group.add_argument("--key", default=None, metavar="FILE", help="with --web and --cert: the certificate's private key (PEM)")
    # Hidden: what the server gives each session's process (watch, or act for a browser with the token).
    group.add_argument("--served", choices=(WATCH, ACT), default=None, help=argparse.SUPPRESS)


def web_options(args: argparse.Namespace) -> WebOptions | str:
    """The options asked for, or the one line saying what is wrong with them."""
    given = [flag for flag, value in (("--port", args.port), ("--host", args.host),
                                      ("--allow-actions", args.allow_actions), ("--max-sessions", args.max_sessions),
                                      ("--idle-minutes", args.idle_minutes), ("--cert", args.cert), ("--key", args.key))
             if value not in (None, False)]
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
    sessions = MAX_SESSIONS if args.max_sessions is None else args.max_sessions
    if not 1 <= sessions <= 1000:
        return f"--max-sessions {sessions}: give 1 to 1000 sessions served at once"
    minutes = IDLE_MINUTES if args.idle_minutes is None else args.idle_minutes
    if not 0 <= minutes <= 100_000:       # NaN fails both comparisons
        return f"--idle-minutes {minutes:g}: give 0 (never) to 100000 minutes"
    if (args.cert is None) != (args.key is None):
        return "--cert and --key go together: the certificate chain and its private key, both PEM files"
    return WebOptions(host, args.port or 0, args.allow_actions, sessions, minutes * 60.0, args.cert, args.key)


def is_address(host: str) -> bool:
    """An IPv4 or IPv6 address, not a name."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


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
