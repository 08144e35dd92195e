"""A headless Chromium driven over the Chrome DevTools protocol, for the tests of the web face.

Started with the flags a closed network needs (no first-run, no background or
component traffic, a fresh profile), on a debugging port the browser picks and
writes to ``DevToolsActivePort``; driven through one websocket (aiohttp, which
textual-serve brings), one flat session per page; stopped by its PID (its own
process group, so its helpers go with it), pass or fail.

The terminal is drawn by xterm.js on a canvas; what it shows is read from the
xterm instance's buffer (the rows the renderer draws), found in the page's heap
through the protocol's ``Runtime.queryObjects``: the page script keeps it in a
closure, out of reach of page JavaScript.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars"]
START_WAIT = 30.0

TERMINAL_ROWS = """function () {
  const w = this.find(o => o && o.fitAddon && o.terminal && o.terminal.buffer);
  if (!w) return null;
  const buffer = w.terminal.buffer.active, rows = [];
  for (let y = 0; y < w.terminal.rows; y++) {
    const line = buffer.getLine(buffer.viewportY + y);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows;
}"""


VIOLATIONS = """window.violations = [];
document.addEventListener("securitypolicyviolation", e => window.violations.push(e.violatedDirective + " " + e.blockedURI));
"""


def chromium() -> str | None:
    return shutil.which("chromium")


class Chromium:
    """One headless browser; ``async with`` starts it and stops it by PID."""

    def __init__(self, profile: Path, size: tuple[int, int] = (1600, 1000)) -> None:
        self.profile = profile
        self.size = size
        self.proc: subprocess.Popen | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        self.requests: list[str] = []        # every URL a page asked for (Network.requestWillBeSent)

    async def __aenter__(self) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        (self.profile / "DevToolsActivePort").unlink(missing_ok=True)    # a reused profile's would be stale
        binary = chromium()
        assert binary is not None
        log = open(self.profile.parent / "chromium.log", "wb")     # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={self.size[0]},{self.size[1]}",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "about:blank"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        try:
            port, path = await self._debugging_address()
            self._http = aiohttp.ClientSession()
            self._ws = await self._http.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)
            self._reader = asyncio.create_task(self._read())
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _debugging_address(self) -> tuple[int, str]:
        """The port and browser path Chromium writes once it listens."""
        path = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_WAIT
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before listening")
            lines = path.read_text().split("\n") if path.exists() else []
            if len(lines) >= 2 and lines[0].isdigit() and lines[1]:
                return int(lines[0]), lines[1]
            await asyncio.sleep(0.05)
        raise RuntimeError(f"chromium did not write {path} within {START_WAIT}s")

    async def _read(self) -> None:
        assert self._ws is not None
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
            elif data.get("method") == "Network.requestWillBeSent":
                self.requests.append(data["params"]["request"]["url"])
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(RuntimeError("the DevTools connection closed"))

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
                   timeout: float = 30.0) -> dict[str, Any]:
        """One protocol command; its ``result`` (a protocol error raises)."""
        assert self._ws is not None
        number = next(self._ids)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[number] = future
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        await self._ws.send_str(json.dumps(message))
        reply = await asyncio.wait_for(future, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def open(self, url: str) -> Page:
        """A new tab on ``url``, its requests recorded, every Content-Security-Policy violation kept in the page's
        ``window.violations``."""
        target = (await self.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        session = (await self.send("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
        page = Page(self, target, session)
        await page.send("Network.enable")
        await page.send("Page.enable")
        await page.send("Page.addScriptToEvaluateOnNewDocument", {"source": VIOLATIONS})
        await page.send("Page.navigate", {"url": url})
        return page

    async def download_to(self, folder: Path) -> None:
        """Files a page downloads (its own or a tab it opens) are saved in ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        await self.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)})

    async def stop(self) -> None:
        """Close the connection, then end the browser's process group by PID: SIGTERM, SIGKILL after 5 s."""
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._ws is not None:
            await self._ws.close()
        if self._http is not None:
            await self._http.close()
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                await asyncio.to_thread(proc.wait, 5.0)
                return
            except subprocess.TimeoutExpired:
                continue


class Page:
    """One tab, through its flat protocol session."""

    def __init__(self, browser: Chromium, target: str, session: str) -> None:
        self.browser, self.target, self.session = browser, target, session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.send(method, params, self.session)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    async def terminal_rows(self) -> list[str] | None:
        """The rows the page's terminal shows now, as text; None before it exists."""
        prototype = await self.send("Runtime.evaluate", {"expression": "Object.prototype"})
        found = await self.send("Runtime.queryObjects", {"prototypeObjectId": prototype["result"]["objectId"]})
        objects = found["objects"]["objectId"]
        try:
            rows = await self.send("Runtime.callFunctionOn", {"objectId": objects, "functionDeclaration": TERMINAL_ROWS,
                                                               "returnByValue": True})
        finally:
            await self.send("Runtime.releaseObject", {"objectId": objects})
        return rows["result"].get("value")

    async def screenshot(self, path: Path) -> None:
        data = (await self.send("Page.captureScreenshot", {"format": "png"}))["data"]
        path.write_bytes(base64.b64decode(data))

    async def close(self) -> None:
        await self.browser.send("Target.closeTarget", {"targetId": self.target})
