"""The web server in-process, each session a tiny Textual app showing its mode and PID: who may act, who may
connect, what the page fetches, and that every session's process ends with its tab or with the server."""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from pdtui.web.options import WebOptions
from pdtui.web.preface import Preface
from pdtui.web.server import WebServer
from tests.conftest_sim import gone, wait_until
from tests.web_helpers import open_session, plain, read_until

APP = str(Path(__file__).parents[1] / "web_app.py")
TOKEN = "s3cret-token"
PID = re.compile(r"mode=(\w+) pid=(\d+)")


class Running:
    def __init__(self, server: WebServer, runner: web.AppRunner, http: aiohttp.ClientSession) -> None:
        self.server, self.runner, self.http = server, runner, http
        self.port = runner.addresses[0][1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def session(self, query: str = "", headers: dict[str, str] | None = None):
        if headers:
            return await self.http.ws_connect(f"ws://127.0.0.1:{self.port}/ws{query}", headers=headers)
        return await open_session(self.http, self.url + query)


async def start(token: str | None = None, preface: Preface | None = None) -> Running:
    server = WebServer(lambda mode: [sys.executable, APP, mode], WebOptions(allow_actions=token is not None),
                       title="test <deployment>", token=token, preface=preface)
    runner = web.AppRunner(await server.make_app(), handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return Running(server, runner, aiohttp.ClientSession())


@pytest.fixture
async def served() -> AsyncIterator[list[Running]]:
    started: list[Running] = []
    yield started
    for running in started:
        await running.http.close()
        await running.server.close()       # every session's process, by PID
        await running.runner.cleanup()


async def shown(ws) -> tuple[str, int]:
    """The mode and PID the session's app shows."""
    found = PID.search(await read_until(ws, PID.search, timeout=30))
    assert found
    return found.group(1), int(found.group(2))


async def closing(ws) -> bool:
    """True once the websocket closes (the screen's last frames read past)."""
    message = await ws.receive(timeout=20)
    while message.type == aiohttp.WSMsgType.BINARY:
        message = await ws.receive(timeout=20)
    return message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)


@pytest.mark.parametrize(("token", "query", "mode"), [
    (TOKEN, f"?token={TOKEN}", "act"),
    (TOKEN, "", "watch"),
    (TOKEN, "?token=wrong", "watch"),
    (TOKEN, f"?token={TOKEN}x", "watch"),
    (None, f"?token={TOKEN}", "watch"),     # a server without --allow-actions has no token to match
])
async def test_only_the_token_on_a_server_that_allows_actions_makes_a_session_that_acts(served, token, query, mode):
    served.append(running := await start(token))
    ws = await running.session(query)
    assert (await shown(ws))[0] == mode
    await ws.close()


async def test_closing_the_tab_ends_its_process_and_the_server_ends_every_other(served):
    served.append(running := await start())
    first, second = await running.session(), await running.session()
    (_, pid1), (_, pid2) = await shown(first), await shown(second)
    assert pid1 != pid2                          # a process per session
    await first.close()
    wait_until(lambda: gone(pid1), timeout=15)
    assert not gone(pid2)
    await running.server.close()
    assert gone(pid2) and not running.server.sessions
    assert await closing(second)


async def test_an_app_that_quits_closes_its_tab(served):
    served.append(running := await start())
    ws = await running.session()
    _, pid = await shown(ws)
    await ws.send_json(["stdin", "\x11"])        # ctrl+q: the app quits by itself
    assert await closing(ws)
    wait_until(lambda: gone(pid), timeout=15)


async def test_malformed_messages_are_ignored(served):
    served.append(running := await start())
    ws = await running.session()
    _, pid = await shown(ws)
    for junk in ("not json", "{}", "[]", '["resize", 3]', '["resize", {"width": "x"}]', '["stdin", 5]', "7"):
        await ws.send_str(junk)
    await ws.send_json(["ping", "42"])
    message = await ws.receive(timeout=10)
    while message.type == aiohttp.WSMsgType.BINARY:
        message = await ws.receive(timeout=10)
    assert message.json() == ["pong", "42"] and not gone(pid)
    await ws.close()


async def test_a_page_of_another_site_cannot_open_a_session(served):
    served.append(running := await start(TOKEN))
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await running.session(f"/{TOKEN}", headers={"Origin": "http://evil.example"})
    assert refused.value.status == 403
    assert not running.server.sessions and running.server.started == 0


async def test_a_host_name_that_is_not_loopback_is_refused_on_loopback(served):
    """DNS rebinding: a site whose name resolves to 127.0.0.1 gets its own name as Host."""
    served.append(running := await start())
    async with running.http.get(running.url, headers={"Host": f"evil.example:{running.port}"}) as response:
        assert response.status == 403
    async with running.http.get(running.url, headers={"Host": f"localhost:{running.port}"}) as response:
        assert response.status == 200


async def test_the_page_fetches_nothing_from_elsewhere_and_every_asset_is_served(served):
    served.append(running := await start(TOKEN))
    async with running.http.get(running.url + f"?token={TOKEN}") as response:
        page = await response.text()
        assert response.headers["Cache-Control"] == "no-store"
    assert "googleapis" not in page and "https://" not in page
    assert f'data-session-websocket-url="ws://127.0.0.1:{running.port}/ws/{TOKEN}"' in page
    assert "test &lt;deployment&gt;" in page                       # the title, escaped
    assets = set(re.findall(r'(?:href|src)="([^"]+)"|url\("([^"]+)"\)', page))
    paths = {a or b for a, b in assets}
    assert paths >= {"/static/css/xterm.css", "/static/js/textual.js", "/static/fonts/RobotoMono-VariableFont_wght.ttf"}
    for path in paths:
        assert path.startswith("/static/"), path
        async with running.http.get(f"http://127.0.0.1:{running.port}{path}") as asset:
            assert asset.status == 200, path
    async with running.http.get(f"http://127.0.0.1:{running.port}/static/") as listing:
        assert listing.status in (403, 404)                        # no directory listing


async def test_a_session_shows_the_preface_until_it_is_finished_then_its_app(served):
    preface = Preface()
    served.append(running := await start(preface=preface))
    preface.write("bringing up\nprefill READY\n")
    ws = await running.session()
    text = await read_until(ws, lambda t: "prefill READY" in t, timeout=10)
    assert "bringing up\r\nprefill READY\r\n" in text and not running.server.sessions
    preface.write("decode READY\n")
    seen = bytearray()
    await read_until(ws, lambda t: "decode READY" in t, timeout=10, seen=seen)
    preface.finish()
    await read_until(ws, PID.search, timeout=30, seen=seen)
    assert "mode=watch" in plain(bytes(seen))
    await ws.close()
