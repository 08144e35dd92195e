"""The web server: textual-serve's terminal and session protocol, with pdtui's rules on who may do what.

textual-serve runs one command per browser websocket (its ``AppService``: the
process's stdin and stdout carry the terminal and meta packets) and ships the
page's script, stylesheet and fonts. What pdtui changes:

- the page is pdtui's own (``page.html``): nothing fetched from the internet, the
  websocket URL taken from the request's own host;
- a session runs the command for ``watch``, or for ``act`` only when the server
  allows actions and the websocket came with the token's cookie: the printed URL's
  ``?token=`` is set in an HttpOnly, SameSite=Strict cookie (Secure over TLS) and the
  browser sent on to the URL without it, out of the address bar and its history.
  The server decides; a browser cannot ask for more;
- a websocket opened by another site's page (its ``Origin`` not this server) is
  refused, and so is a ``Host`` that is none of this server's names (DNS rebinding:
  on loopback a loopback name; elsewhere an address, the ``--host`` name or this
  machine's name): other pages in the same browser cannot watch through it;
- every answer forbids framing and sniffing and sends no referrer; the page's
  policy lets it load only from this server;
- bounds: at most ``max_sessions`` websockets at once (one more gets a line saying
  so), a terminal of at most :data:`TERMINAL_LIMIT`, a browser message of at most
  :data:`MESSAGE_LIMIT`, request lines and headers within :data:`HTTP_LIMITS`, and a
  session ended after ``idle`` seconds without a message from its tab;
- a file the app delivers (a saved log, a screenshot) is downloaded from
  ``/download/KEY``, a key only its session's tab is told: nothing is written where
  the server runs;
- each session's process is ended by its PID when its tab closes or the server
  stops: asked to quit, SIGTERM after a grace, SIGKILL last, and waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import shlex
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import WSCloseCode, WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.server import Server

from pdtui.web.options import ACT, WATCH, WebOptions, is_address, is_loopback
from pdtui.web.preface import Preface

PAGE_DIR = Path(__file__).parent
STOP_GRACE = 5.0
"""Seconds a session's app gets to quit (closing its connections) before SIGTERM, and again before SIGKILL."""
FONT_SIZES = range(6, 65)
HEARTBEAT = 15.0
"""Seconds between the server's pings on a session's websocket: a tab gone without closing it is noticed."""
TERMINAL_LIMIT = (500, 200)
"""The largest terminal a browser may ask for, columns by rows (the query string's and every resize's)."""
MESSAGE_LIMIT = 64 * 1024
"""The largest websocket message a browser may send (a key, a paste, a resize); a larger one ends its session."""
HTTP_LIMITS: dict[str, Any] = {"max_line_size": 8190, "max_field_size": 8190, "max_headers": 64}
"""aiohttp's bounds on a request line, a header and the number of headers (a browser sends some twenty)."""
BODY_LIMIT = 64 * 1024
"""The largest request body (the page takes none)."""
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
"""On every answer: never framed, never sniffed, no referrer; the page loads from this server alone (textual.js
adds its stylesheets as style elements, hence inline styles)."""


class Session(AppService):
    """One browser session's app process, started from an argv (no shell) in a session of its own."""

    def __init__(self, argv: list[str], **kwargs) -> None:
        super().__init__(shlex.join(argv), **kwargs)
        self.argv = argv

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
        """As textual-serve opens it, but exec'd: no shell between the server and the PID it stops."""
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._build_environment(width=width, height=height),
            start_new_session=True)     # Ctrl-C at the server's terminal reaches the server alone: it ends them
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    async def start(self, width: int, height: int) -> None:
        await self._open_app_process(width, height)
        self._task = asyncio.create_task(self._run_then_close())

    async def _run_then_close(self) -> None:
        """Relay the app until its output ends, then close the tab's websocket (it shows "Session ended")."""
        await self.run()
        with contextlib.suppress(Exception):
            await self.remote_close()

    async def stop(self) -> None:
        """End the app: quit, then SIGTERM, then SIGKILL, each after :data:`STOP_GRACE`; return once it is gone."""
        process = self._process
        if process is None:
            return
        await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
        if process.returncode is None:
            with contextlib.suppress(Exception):
                await self.send_meta({"type": "quit"})
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if process.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                if sig is signal.SIGTERM:
                    process.send_signal(sig)      # the app's driver takes it as quit
                elif sig is signal.SIGKILL:
                    os.killpg(process.pid, sig)   # its own process group (start_new_session)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), STOP_GRACE)
        if self._task is not None:
            await self._task


class WebServer(Server):
    """Serves pdtui's page and runs ``command(mode)`` per websocket; :meth:`close` ends every session."""

    def __init__(self, command: Callable[[str], list[str]], options: WebOptions, *, title: str,
                 token: str | None = None, preface: Preface | None = None) -> None:
        super().__init__(shlex.join(command(WATCH)), host=options.host, port=options.port, title=title)
        self.command_for = command
        self.options = options
        self.token = token
        self.preface = preface
        self.sessions: set[Session] = set()
        self.sockets: set[web.WebSocketResponse] = set()
        self.closing = False
        self.started = 0          # sessions started so far
        self.names = served_names(options.host)

    async def _make_app(self) -> web.Application:
        return await self.make_app()

    async def make_app(self) -> web.Application:
        """The page, its static files (textual-serve's, no directory listing), the websocket and download routes."""
        app = web.Application(client_max_size=BODY_LIMIT)
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(PAGE_DIR))
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.get("/download/{key}", self.handle_download, name="download"),
            web.static("/static", self.statics_path, name="static"),
        ])
        app.on_response_prepare.append(_secure_headers)
        return app

    async def runner(self) -> web.AppRunner:
        """The app's runner, set up, with :data:`HTTP_LIMITS` on every request: what a site is started on."""
        runner = web.AppRunner(await self.make_app(), handle_signals=False, access_log=None, shutdown_timeout=2.0,
                               **HTTP_LIMITS)
        await runner.setup()
        return runner

    # -- who may -----------------------------------------------------------------------------------
    def trusted(self, request: web.Request) -> bool:
        """Same origin (or none: not a browser page), and a Host that names this server (no DNS rebinding)."""
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc.lower() != request.host.lower():
            return False
        try:
            hostname = urlsplit(f"//{request.host}").hostname
        except ValueError:                      # "[" without its "]"
            return False
        if hostname is None:
            return False
        if self.options.loopback:
            return is_loopback(hostname)
        return is_address(hostname) or is_loopback(hostname) or hostname in self.names

    def full(self) -> str:
        """Why one more session is refused, or nothing when there is room."""
        most = self.options.max_sessions
        if len(self.sockets) < most:
            return ""
        return (f"pdtui: {most} session{'s are' if most != 1 else ' is'} open, the most this server serves "
                f"(--max-sessions {most}): close one, then reload this page")

    @staticmethod
    def cookie(request: web.Request) -> str:
        """The token's cookie for this server (cookies are shared by every port of a host: the port is in its name)."""
        return f"pdtui-token-{request.url.port}"

    def mode(self, given: str | None) -> str:
        """``act`` for the token when actions are allowed; ``watch`` for anything else."""
        if self.token is None or not given:
            return WATCH
        return ACT if hmac.compare_digest(given.encode(), self.token.encode()) else WATCH

    # -- the page ----------------------------------------------------------------------------------
    async def handle_index(self, request: web.Request) -> web.Response:
        """The page. With ``?token=``: the token (if it is this server's) set in a cookie, and the browser sent on to
        the same URL without it."""
        if not self.trusted(request):
            raise web.HTTPForbidden(text="pdtui: this page is served to its own host only\n")
        if "token" in request.query:
            return self._take_token(request)
        if full := self.full():
            raise web.HTTPServiceUnavailable(text=f"{full}\n", headers={"Cache-Control": "no-store"})
        size = _int(request.query.get("fontsize", ""), 16)
        context = {
            "title": self.title,
            "static_url": "/static/",
            "websocket_url": f"{'wss' if request.secure else 'ws'}://{request.host}/ws",
            "font_size": size if size in FONT_SIZES else 16,
        }
        response = aiohttp_jinja2.render_template("page.html", request, context)
        response.headers["Cache-Control"] = "no-store"
        return response

    def _take_token(self, request: web.Request) -> web.Response:
        """303 to the URL without ``token``; the cookie set when it is this server's (a wrong one sets nothing)."""
        response = web.Response(status=303, headers={"Location": str(request.rel_url.without_query_params("token")),
                                                     "Cache-Control": "no-store"})
        token = request.query.get("token", "")
        if self.mode(token) == ACT:
            response.set_cookie(self.cookie(request), token, path="/", httponly=True, samesite="Strict",
                                secure=request.secure)
        return response

    async def handle_download(self, request: web.Request) -> web.StreamResponse:
        """A file a session's app delivers (its key was sent to that session's tab alone), for this server's pages."""
        if not self.trusted(request):
            raise web.HTTPForbidden(text="pdtui: downloads are for pages of this server only\n")
        return await super().handle_download(request)

    # -- a session ---------------------------------------------------------------------------------
    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One browser tab: the preface (if any), then its own app process until the tab or the app closes."""
        if not self.trusted(request):
            raise web.HTTPForbidden(text="pdtui: sessions are for pages of this server only\n")
        mode = self.mode(request.cookies.get(self.cookie(request)))
        websocket = web.WebSocketResponse(heartbeat=HEARTBEAT, max_msg_size=MESSAGE_LIMIT)
        if full := self.full():
            await websocket.prepare(request)
            await websocket.send_bytes(f"{full}\r\n".encode())
            await websocket.close(code=WSCloseCode.TRY_AGAIN_LATER, message=b"pdtui: too many sessions")
            return websocket
        self.sockets.add(websocket)                # before any wait: the count is always the truth
        try:
            await websocket.prepare(request)
            if self.preface is not None:
                await self.preface.follow(websocket.send_bytes)
            if not self.closing and not websocket.closed:
                await self._run_session(websocket, mode, *terminal_size(request.query.get("width"),
                                                                        request.query.get("height")))
        except ConnectionResetError:
            pass                                  # the tab went away while being written to
        finally:
            self.sockets.discard(websocket)
            if websocket.prepared:
                await websocket.close()
        return websocket

    async def _run_session(self, websocket: web.WebSocketResponse, mode: str, width: int, height: int) -> None:
        session = Session(self.command_for(mode), write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                          close=websocket.close, download_manager=self.download_manager)
        self.sessions.add(session)
        self.started += 1
        try:
            await session.start(width, height)
            await self._relay(websocket, session)
        finally:
            await session.stop()
            self.sessions.discard(session)

    async def _relay(self, websocket: web.WebSocketResponse, session: Session) -> None:
        """The browser's messages to the app: keys, size, focus; a malformed one is ignored. Ends with the tab, or
        after ``idle`` seconds without a message from it (saying so): one deadline over the reads, as the answers to
        the heartbeat's pings are read, unseen, within them."""
        loop, idle = asyncio.get_running_loop(), self.options.idle
        while True:
            try:
                async with asyncio.timeout_at(loop.time() + idle if idle else None):
                    message = await websocket.receive()
            except TimeoutError:
                await websocket.send_bytes(f"\r\n{idle_line(idle)}\r\n".encode())
                return
            if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return
            if message.type != WSMsgType.TEXT:
                continue
            try:
                kind, *rest = json.loads(message.data)
            except (ValueError, TypeError, RecursionError):
                continue
            data = rest[0] if rest else None
            if kind == "stdin" and isinstance(data, str):
                await session.send_bytes(data.encode("utf-8", "replace"))
            elif kind == "resize" and isinstance(data, dict):
                await session.set_terminal_size(*terminal_size(data.get("width"), data.get("height")))
            elif kind == "ping":
                await websocket.send_json(["pong", data])
            elif kind == "blur":
                await session.blur()
            elif kind == "focus":
                await session.focus()

    async def close(self) -> None:
        """End every session's process (by PID, waited for), then close every websocket still open."""
        self.closing = True
        if self.preface is not None:
            self.preface.finish()
        await asyncio.gather(*(session.stop() for session in list(self.sessions)), return_exceptions=True)
        for websocket in list(self.sockets):
            await websocket.close(code=1001, message=b"pdtui: the server stopped")


def _int(value: object, default: int) -> int:
    """A browser's number, or ``default`` when it is none."""
    try:
        return int(str(value))
    except ValueError:
        return default


def terminal_size(width: object, height: object) -> tuple[int, int]:
    """The terminal a browser asks for, within 1 x 1 and :data:`TERMINAL_LIMIT` (80 x 24 for what is no number)."""
    return (min(max(_int(width, 80), 1), TERMINAL_LIMIT[0]), min(max(_int(height, 24), 1), TERMINAL_LIMIT[1]))


def idle_line(seconds: float) -> str:
    """What a session ended for idleness says to its tab."""
    return (f"pdtui: this session ended after {seconds / 60:g} minutes without a key, click or resize from this tab "
            f"(--idle-minutes); reload the page to watch again")


def served_names(host: str) -> frozenset[str]:
    """The names a browser may give as Host off loopback: the ``--host`` name, this machine's name (and its first
    label); any address is taken too (an address cannot be rebound to another site)."""
    machine = socket.gethostname().lower()
    return frozenset({host.strip("[]").lower(), machine, machine.split(".")[0]} - {"", "0.0.0.0", "::"})


async def _secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer (page, asset, download, refusal, websocket handshake) with :data:`SECURITY_HEADERS`."""
    response.headers.update(SECURITY_HEADERS)
