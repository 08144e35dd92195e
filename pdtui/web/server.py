"""The web server: textual-serve's terminal and session protocol, with pdtui's rules on who may do what.

textual-serve runs one command per browser websocket (its ``AppService``: the
process's stdin and stdout carry the terminal and meta packets) and ships the
page's script, stylesheet and fonts. What pdtui changes:

- the page is pdtui's own (``page.html``): nothing fetched from the internet, the
  websocket URL taken from the request's own host;
- a session runs the command for ``watch``, or for ``act`` only when the server
  allows actions and the websocket came with the token (in its path: the page passes
  on the token of its own URL). The server decides; a browser cannot ask for more;
- a websocket opened by another site's page (its ``Origin`` not this server) is
  refused, and on loopback so is a ``Host`` that is not a loopback name (DNS
  rebinding): other pages in the same browser cannot watch through it;
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
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.server import Server

from pdtui.web.options import ACT, WATCH, WebOptions, is_loopback
from pdtui.web.preface import Preface

PAGE_DIR = Path(__file__).parent
STOP_GRACE = 5.0
"""Seconds a session's app gets to quit (closing its connections) before SIGTERM, and again before SIGKILL."""
FONT_SIZES = range(6, 65)


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

    async def _make_app(self) -> web.Application:
        return await self.make_app()

    async def make_app(self) -> web.Application:
        """The page, its static files (textual-serve's, no directory listing) and the websocket routes."""
        app = web.Application()
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(PAGE_DIR))
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.get("/ws/{token}", self.handle_websocket, name="websocket-token"),
            web.static("/static", self.statics_path, name="static"),
        ])
        return app

    # -- who may -----------------------------------------------------------------------------------
    def trusted(self, request: web.Request) -> bool:
        """Same origin (or none: not a browser page), and on loopback a loopback Host (no DNS rebinding)."""
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc.lower() != request.host.lower():
            return False
        if self.options.loopback:
            hostname = urlsplit(f"//{request.host}").hostname
            return hostname is not None and is_loopback(hostname)
        return True

    def mode(self, given: str | None) -> str:
        """``act`` for the token when actions are allowed; ``watch`` for anything else."""
        if self.token is None or not given:
            return WATCH
        return ACT if hmac.compare_digest(given.encode(), self.token.encode()) else WATCH

    # -- the page ----------------------------------------------------------------------------------
    async def handle_index(self, request: web.Request) -> web.Response:
        """The page; its websocket URL carries the token of the page's own URL, if any."""
        if not self.trusted(request):
            raise web.HTTPForbidden(text="pdtui: this page is served to its own host only\n")
        token = request.query.get("token", "")
        path = f"/ws/{quote(token, safe='')}" if token else "/ws"
        size = _int(request.query.get("fontsize", ""), 16)
        context = {
            "title": self.title,
            "static_url": "/static/",
            "websocket_url": f"{'wss' if request.secure else 'ws'}://{request.host}{path}",
            "font_size": size if size in FONT_SIZES else 16,
        }
        response = aiohttp_jinja2.render_template("page.html", request, context)
        response.headers["Cache-Control"] = "no-store"     # it may hold the token
        return response

    # -- a session ---------------------------------------------------------------------------------
    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One browser tab: the preface (if any), then its own app process until the tab or the app closes."""
        if not self.trusted(request):
            raise web.HTTPForbidden(text="pdtui: sessions are for pages of this server only\n")
        mode = self.mode(request.match_info.get("token"))
        websocket = web.WebSocketResponse(heartbeat=15)
        await websocket.prepare(request)
        self.sockets.add(websocket)
        try:
            if self.preface is not None:
                await self.preface.follow(websocket.send_bytes)
            if not self.closing and not websocket.closed:
                await self._run_session(websocket, mode, _int(request.query.get("width", ""), 80),
                                        _int(request.query.get("height", ""), 24))
        except ConnectionResetError:
            pass                                  # the tab went away while being written to
        finally:
            self.sockets.discard(websocket)
            await websocket.close()
        return websocket

    async def _run_session(self, websocket: web.WebSocketResponse, mode: str, width: int, height: int) -> None:
        session = Session(self.command_for(mode), write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                          close=websocket.close, download_manager=self.download_manager)
        self.sessions.add(session)
        self.started += 1
        try:
            await session.start(max(width, 1), max(height, 1))
            await self._relay(websocket, session)
        finally:
            await session.stop()
            self.sessions.discard(session)

    async def _relay(self, websocket: web.WebSocketResponse, session: Session) -> None:
        """The browser's messages to the app: keys, size, focus; a malformed one is ignored."""
        async for message in websocket:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                kind, *rest = json.loads(message.data)
            except (ValueError, TypeError):
                continue
            data = rest[0] if rest else None
            if kind == "stdin" and isinstance(data, str):
                await session.send_bytes(data.encode("utf-8"))
            elif kind == "resize" and isinstance(data, dict):
                await session.set_terminal_size(_int(data.get("width"), 80), _int(data.get("height"), 24))
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
