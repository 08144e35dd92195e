"""``status --web`` and ``demo --web``: listen, print the URL, serve until Ctrl-C or SIGTERM, then end every session.

The server runs in one asyncio loop with, for the demo, the bring-up of its
simulated deployment: brought up once, here, while each browser session attaches
to it with ``pdtui status`` (see :mod:`pdtui.web.preface`). Stopping ends every
session's process first; the demo's caller then stops the deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from pdtui.support.exits import EXIT_OK, EXIT_USAGE
from pdtui.support.text import inert
from pdtui.web.options import WebOptions, session_command
from pdtui.web.preface import Preface
from pdtui.web.server import WebServer

if TYPE_CHECKING:
    from pdtui.engine.events import EventSource

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
BringUp = Callable[[Preface], Coroutine[Any, Any, object]]


def serve_status(deployment, config: str, args: argparse.Namespace, options: WebOptions) -> int:
    """``pdtui status CONFIG --web``: every session watches the deployment of CONFIG."""
    path = str(Path(config).resolve())
    return serve(lambda mode: session_command(path, args, mode), options, deployment.name)


def serve_demo(deployment, config: Path, args: argparse.Namespace, options: WebOptions,
               make_orchestrator: Callable[[], EventSource]) -> int:
    """``pdtui demo --web``: bring the simulated deployment up once, here; every session attaches to it.
    ``make_orchestrator`` makes the bring-up (once serving): the demo's command composes it, with the probe its options
    ask for and the targets it runs on, so this face imports neither the commands nor the targets."""
    from pdtui.faces.headless import LinePrinter

    async def bring_up(preface: Preface) -> object:
        print("pdtui demo: bringing up the simulated deployment; the TUI opens here once it is decided\n",
              file=preface, flush=True)
        source = make_orchestrator()
        source.subscribe(LinePrinter(out=preface))
        try:
            return await source.run()
        except Exception as exc:  # noqa: BLE001 - one line for the terminal and the sessions, never a traceback
            print(f"pdtui demo: the bring-up stopped: {exc}", file=preface, flush=True)
            return None
        finally:
            await source.close()      # its tails and probes end; the units run on for the sessions
            preface.finish()

    return serve(lambda mode: session_command(str(config), args, mode), options, deployment.name, bring_up)


def serve(command: Callable[[str], list[str]], options: WebOptions, title: str, bring_up: BringUp | None = None) -> int:
    """Serve until stopped; 0 once stopped, 2 when it cannot listen."""
    return asyncio.run(_serve(command, options, title, bring_up))


async def _serve(command: Callable[[str], list[str]], options: WebOptions, title: str, bring_up: BringUp | None) -> int:
    tls = tls_context(options)
    if isinstance(tls, str):
        print(f"pdtui: {tls}", file=sys.stderr)
        return EXIT_USAGE
    token = secrets.token_urlsafe(24) if options.allow_actions else None
    preface = Preface(echo=sys.stderr) if bring_up is not None else None
    server = WebServer(command, options, title=title, token=token, preface=preface)
    with _stop_signals() as stopped:
        runner = await server.runner()
        try:
            await web.TCPSite(runner, options.host, options.port, ssl_context=tls).start()
        except OSError as exc:
            await runner.cleanup()
            print(f"pdtui: cannot listen on {options.host}:{options.port}: {_reason(exc)}", file=sys.stderr)
            return EXIT_USAGE
        _announce(options, runner.addresses[0][1], token)
        task = asyncio.create_task(bring_up(preface)) if bring_up is not None and preface is not None else None
        await stopped.wait()
        print("pdtui: stopping the web server and its sessions", file=sys.stderr, flush=True)
        server.closing = True           # first: a tab waiting for the bring-up must not start its app now
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await server.close()
        await runner.cleanup()
    print(f"pdtui: web server stopped; {_sessions(server.started)} ended", file=sys.stderr, flush=True)
    return EXIT_OK


def tls_context(options: WebOptions) -> ssl.SSLContext | None | str:
    """The server's TLS context from ``--cert``/``--key`` (None without them), or the line saying why it cannot be."""
    if options.cert is None or options.key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(options.cert, options.key)
    except ssl.SSLError as exc:   # a file that is no PEM, a key that is not the certificate's
        what = f"not a PEM certificate chain and its private key ({exc.reason or exc.strerror})"
    except OSError as exc:
        what = exc.strerror or str(exc)
    else:
        return context
    return inert(f"--cert {options.cert} --key {options.key}: cannot serve TLS with them: {what}")


def _announce(options: WebOptions, port: int, token: str | None) -> None:
    """The URL (with its token when actions are allowed) on stdout; off loopback, the warnings on stderr."""
    base = f"{'https' if options.tls else 'http'}://{_url_host(options.host)}:{port}/"
    url = f"{base}?token={token}" if token else base
    acting = ("; a browser with this URL's token may restart, stop, retry, prove the pairs and save logs" if token
              else "; it watches only (restart, stop, retry, proving the pairs and saving logs are refused)")
    print(f"pdtui: serving the TUI at {url}{acting}; Ctrl-C stops it", flush=True)
    if not options.loopback:
        print(f"pdtui: warning: listening on {options.host}: anyone who reaches {base} sees the deployment",
              file=sys.stderr, flush=True)
        if not options.tls:
            secret = "the token, " if token else ""
            print(f"pdtui: warning: no TLS: {secret}the page and the deployment's logs cross the network in clear "
                  f"text; give --cert and --key to serve https", file=sys.stderr, flush=True)


def _reason(exc: OSError) -> str:
    """Why a bind failed, in the system's words (asyncio wraps them in a sentence of its own)."""
    if isinstance(exc, socket.gaierror) or not exc.errno:
        return str(exc.strerror or exc)
    return os.strerror(exc.errno).lower()


def _url_host(host: str) -> str:
    """How a browser names ``host``: this machine's name for a wildcard, brackets for IPv6."""
    if host in ("0.0.0.0", "::", ""):
        return socket.gethostname()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _sessions(count: int) -> str:
    return f"{count} session" + ("" if count == 1 else "s")


@contextlib.contextmanager
def _stop_signals() -> Iterator[asyncio.Event]:
    """An event set by Ctrl-C, SIGTERM or SIGHUP while serving; the signals' handlers as they were afterwards."""
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stopped.set)
    try:
        yield stopped
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)
