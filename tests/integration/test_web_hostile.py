"""The web face's hostile-input corpus (tests/hostile/web/cases.json), one case per test: each message or request
refused, ignored or clamped as the case expects; the server serves its page afterwards; nothing is written in its
working directory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from tests.integration.test_web_server import closing, served, start  # noqa: F401 - served is a fixture
from tests.web_helpers import read_until, websocket_url

CASES = json.loads((Path(__file__).parents[1] / "hostile" / "web" / "cases.json").read_text())


def payloads(case: dict) -> list[str | bytes]:
    """The case's websocket messages, each as text or bytes."""
    sent: list[str | bytes] = []
    for item in case.get("send", []):
        times = item.get("times", 1)
        if "json" in item:
            sent.append(json.dumps(item["json"]))
        elif "binary" in item:
            sent.append(bytes.fromhex(item["binary"]) * times)
        else:
            sent.append(item["text"] * times)
    return sent


async def answers_ping(ws: aiohttp.ClientWebSocketResponse) -> bool:
    """The session still reads its tab's messages: a ping is answered."""
    await ws.send_json(["ping", "alive?"])
    async with asyncio.timeout(30):
        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.TEXT and message.json() == ["pong", "alive?"]:
                return True
            if message.type != aiohttp.WSMsgType.BINARY:
                return False


async def run_session(running, case: dict) -> None:
    async with running.http.get(running.url) as page:
        url = websocket_url(await page.text())
    ws = await running.http.ws_connect(url + case.get("query", "?width=160&height=50"), max_msg_size=0,
                                       headers={"Origin": running.url.rstrip("/")})
    seen = bytearray()
    shows = case.get("shows", "mode=watch")
    await read_until(ws, lambda text: shows in text, timeout=30, seen=seen)
    for payload in payloads(case):
        await (ws.send_bytes(payload) if isinstance(payload, bytes) else ws.send_str(payload))
    kind, _, value = case["expect"].partition(" ")
    if kind == "size":
        await read_until(ws, lambda text: f"size={value}" in text, timeout=30, seen=seen)
    elif kind == "alive":
        assert await answers_ping(ws)
    else:
        assert kind == "closed" and await closing(ws) and ws.close_code == int(value)
    await ws.close()


async def run_request(running, case: dict) -> None:
    request = case["http"]
    headers = dict(request.get("headers", {}))
    headers.update({f"X-Many-{n}": "1" for n in range(request.get("many_headers", 0))})
    body = b"x" * request.get("body_bytes", 0) or None
    async with running.http.request(request.get("method", "GET"), running.url.rstrip("/") + request["path"],
                                    headers=headers, data=body, allow_redirects=False) as answer:
        assert answer.status == int(case["expect"].split()[1]), await answer.text()
        assert "pdtui-token" not in answer.headers.get("Set-Cookie", "")


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
async def test_hostile_web_input_is_refused_ignored_or_clamped(served, case, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)              # the server's, and so its sessions', working directory
    served.append(running := await start("the-token"))
    await (run_request(running, case) if "http" in case else run_session(running, case))
    async with running.http.get(running.url) as page:
        assert page.status == 200
    assert list(tmp_path.iterdir()) == []
