"""The web server in-process, each session a tiny Textual app showing its mode, PID and size: who may act (the
token's cookie), who may connect, what the page fetches, the headers of every answer, the bounds (sessions, idle
time), TLS, downloads, and that every session's process ends with its tab or with the server."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from pdtui.web import server as server_module
from pdtui.web.options import WebOptions
from pdtui.web.preface import Preface
from pdtui.web.server import SECURITY_HEADERS, WebServer
from tests.conftest_sim import gone, wait_until
from tests.web_app import DELIVERED
from tests.web_helpers import client, open_session, plain, read_until, self_signed

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


async def start(token: str | None = None, preface: Preface | None = None, ssl_context=None, **options) -> Running:
    """The server on 127.0.0.1 (whatever host its options name: the Host check follows them)."""
    server = WebServer(lambda mode: [sys.executable, APP, mode], WebOptions(allow_actions=token is not None, **options),
                       title="test <deployment>", token=token, preface=preface)
    runner = await server.runner()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
    return Running(server, runner, client())


@pytest.fixture
async def served() -> AsyncIterator[list[Running]]:
    started: list[Running] = []
    yield started
    for running in started:
        await running.http.close()
        await running.server.close()       # every session's process, by PID
        await running.runner.cleanup()


async def eventually(check, timeout: float = 20.0) -> None:
    """Wait, the loop running (the server is in it), until ``check()``; fail the test if it never is."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.05)


async def kept_alive(ws, every: float = 0.3) -> None:
    """Send the session a message from its tab (a resize to its size) every ``every`` seconds, as a user at it does."""
    while True:
        await ws.send_str(json.dumps(["resize", {"width": 160, "height": 50}]))
        await asyncio.sleep(every)


async def shown(ws) -> tuple[str, int]:
    """The mode and PID the session's app shows."""
    found = PID.search(await read_until(ws, PID.search, timeout=30))
    assert found
    return found.group(1), int(found.group(2))


async def closing(ws, timeout: float = 30.0) -> bool:
    """True once the websocket closes (the screen's last frames read past); False if it stays open ``timeout`` s
    (the server's heartbeat pings keep a single receive waiting for ever)."""
    try:
        async with asyncio.timeout(timeout):
            message = await ws.receive()
            while message.type == aiohttp.WSMsgType.BINARY:
                message = await ws.receive()
    except TimeoutError:
        return False
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
        await running.session("", headers={"Origin": "http://evil.example",
                                           "Cookie": f"pdtui-token-{running.port}={TOKEN}"})
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
    assert f'data-session-websocket-url="ws://127.0.0.1:{running.port}/ws"' in page and TOKEN not in page
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


async def test_the_token_goes_to_a_cookie_and_the_browser_is_sent_on_without_it(served):
    served.append(running := await start(TOKEN))
    async with running.http.get(running.url + f"?token={TOKEN}&fontsize=20", allow_redirects=False) as answer:
        assert answer.status == 303 and answer.headers["Location"] == "/?fontsize=20"
        cookie = answer.cookies[f"pdtui-token-{running.port}"]
    assert cookie.value == TOKEN and cookie["httponly"] and cookie["samesite"] == "Strict" and not cookie["secure"]
    assert cookie["path"] == "/"
    async with running.http.get(running.url + "?token=wrong", allow_redirects=False) as answer:
        assert answer.status == 303 and answer.headers["Location"] == "/" and not answer.cookies
    async with aiohttp.ClientSession() as stranger:      # no cookie: a websocket on its own watches
        ws = await stranger.ws_connect(f"ws://127.0.0.1:{running.port}/ws")
        assert (await shown(ws))[0] == "watch"
        await ws.close()


async def test_every_answer_forbids_framing_and_sniffing_and_sends_no_referrer(served):
    served.append(running := await start(TOKEN))
    base = f"http://127.0.0.1:{running.port}"
    for path, headers, status in (("/", {}, 200), (f"/?token={TOKEN}", {}, 303), ("/static/css/xterm.css", {}, 200),
                                  ("/nowhere", {}, 404), ("/download/nokey", {}, 404),
                                  ("/", {"Host": "evil.example"}, 403)):
        async with running.http.get(base + path, headers=headers, allow_redirects=False) as answer:
            assert answer.status == status, path
            assert {name: answer.headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS, path
    assert "frame-ancestors 'none'" in SECURITY_HEADERS["Content-Security-Policy"]


async def test_one_session_more_than_the_limit_is_refused_with_a_line_saying_so(served):
    served.append(running := await start(max_sessions=2))
    first, second = await running.session(), await running.session()
    await shown(first), await shown(second)
    async with running.http.get(running.url) as page:
        assert page.status == 503 and "2 sessions are open, the most this server serves" in await page.text()
    third = await running.http.ws_connect(f"ws://127.0.0.1:{running.port}/ws")
    message = await third.receive(timeout=10)
    assert message.type == aiohttp.WSMsgType.BINARY
    assert plain(message.data).strip() == ("pdtui: 2 sessions are open, the most this server serves (--max-sessions 2)"
                                           ": close one, then reload this page")
    assert await closing(third) and third.close_code == 1013
    assert running.server.started == 2
    await first.close()
    await eventually(lambda: len(running.server.sockets) == 1)
    again = await running.session()
    assert (await shown(again))[0] == "watch"
    await again.close()
    await second.close()


async def test_a_session_without_a_message_from_its_tab_for_the_idle_time_ends_and_says_so(served, monkeypatch):
    """The tab's answers to the heartbeat's pings are no message from it: they do not keep the session."""
    monkeypatch.setattr(server_module, "HEARTBEAT", 0.2)
    served.append(running := await start(idle=1.0))
    ws = await running.session()
    keeping = asyncio.ensure_future(kept_alive(ws))     # until the app shows, however long a loaded machine takes
    try:
        _, pid = await shown(ws)
    finally:
        keeping.cancel()
    text = await read_until(ws, lambda t: "pdtui: this session ended after" in t, timeout=30)
    assert "without a key, click or resize from this tab (--idle-minutes); reload the page to watch again" in text
    assert await closing(ws)
    wait_until(lambda: gone(pid), timeout=15)


@pytest.mark.parametrize(("name", "allowed"), [("evil.example", False), ("pdtui-test.example", True),
                                               ("127.0.0.1", True), ("10.1.2.3", True), ("localhost", True)])
async def test_off_loopback_a_host_that_names_none_of_this_server_is_refused(served, name, allowed):
    """DNS rebinding off loopback: the Host must be the --host name, this machine's name, or an address."""
    served.append(running := await start(host="pdtui-test.example"))
    async with running.http.get(running.url, headers={"Host": f"{name}:{running.port}"}) as response:
        assert response.status == (200 if allowed else 403)


async def test_off_loopback_this_machines_own_name_is_a_host_it_serves(served):
    served.append(running := await start(host="0.0.0.0"))
    async with running.http.get(running.url, headers={"Host": f"{socket.gethostname()}:{running.port}"}) as response:
        assert response.status == 200


async def test_a_file_the_app_delivers_is_downloaded_by_its_tab_and_nothing_is_written_where_it_runs(
        served, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    served.append(running := await start())
    ws = await running.session()
    await shown(ws)
    await ws.send_json(["stdin", "d"])
    message = await ws.receive(timeout=20)
    while message.type == aiohttp.WSMsgType.BINARY:
        message = await ws.receive(timeout=20)
    kind, key = message.json()
    assert kind == "deliver_file_start"
    async with running.http.get(f"http://127.0.0.1:{running.port}/download/{key}") as download:
        assert download.status == 200 and await download.text() == DELIVERED
        assert download.headers["Content-Disposition"] == "attachment; filename=shown.log"
    async with running.http.get(f"http://127.0.0.1:{running.port}/download/{key}") as again:
        assert again.status == 404                        # once
    assert list(tmp_path.iterdir()) == []
    await ws.close()


async def test_tls_serves_the_page_and_the_session_over_https_with_a_secure_cookie(served, tmp_path):
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    served.append(running := await start(TOKEN, ssl_context=context, cert=str(cert), key=str(key)))
    trusting = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{running.port}/"
    async with running.http.get(url + f"?token={TOKEN}", ssl=trusting, allow_redirects=False) as answer:
        assert answer.status == 303 and answer.cookies[f"pdtui-token-{running.port}"]["secure"]
    async with running.http.get(url, ssl=trusting) as page:
        assert page.status == 200 and f'"wss://127.0.0.1:{running.port}/ws"' in await page.text()
    ws = await running.http.ws_connect(f"wss://127.0.0.1:{running.port}/ws", ssl=trusting,
                                       headers={"Origin": f"https://127.0.0.1:{running.port}"})
    assert (await shown(ws))[0] == "act"
    await ws.close()
    with pytest.raises(aiohttp.ClientError):              # plain http is not served beside it
        async with running.http.get(f"http://127.0.0.1:{running.port}/"):
            pass
