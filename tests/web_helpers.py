"""Helpers for the web face's tests: a ``pdtui ... --web`` process stopped by its PID, and a session's screen as text.

A session's websocket carries what the app writes to its terminal; with the
escape sequences taken out, the text it drew can be searched (the browser test
reads what xterm.js shows instead).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pdtui.sim.sandbox import Sandbox

URL = re.compile(r"serving the TUI at (https?://127\.0\.0\.1:(\d+)/(?:\?token=([\w-]+))?)")
WEBSOCKET_URL = re.compile(r'data-session-websocket-url="([^"]+)"')
ESCAPES = re.compile(r"\x1b(?:\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78])")
START_WAIT = 30.0
STOP_WAIT = 40.0


def plain(data: bytes) -> str:
    """What a terminal stream writes, its escape sequences removed."""
    return ESCAPES.sub("", data.decode("utf-8", "replace"))


def websocket_url(page: str) -> str:
    """The session websocket a page connects to."""
    found = WEBSOCKET_URL.search(page)
    assert found, page[:500]
    return found.group(1)


def client() -> aiohttp.ClientSession:
    """An HTTP client that keeps cookies as a browser does, for 127.0.0.1 too (aiohttp's own keeps none for an
    address): the token's cookie reaches the session's websocket."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def open_session(http: aiohttp.ClientSession, url: str, size: tuple[int, int] = (160, 50)):
    """Load ``url``'s page (sent on without its token, the token's cookie kept) and open the session its script
    would (same Origin as the page)."""
    async with http.get(url) as response:
        assert response.status == 200
        page = await response.text()
    origin = url.split("/?")[0].rstrip("/")
    return await http.ws_connect(f"{websocket_url(page)}?width={size[0]}&height={size[1]}", headers={"Origin": origin},
                                 max_msg_size=0)


async def read_until(ws: aiohttp.ClientWebSocketResponse, done: Callable[[str], bool], timeout: float = 40.0,
                     seen: bytearray | None = None) -> str:
    """Read the session's output until ``done(text so far)``; fail the test with what came if it never is."""
    data = seen if seen is not None else bytearray()
    try:
        async with asyncio.timeout(timeout):
            while not done(plain(bytes(data))):
                message = await ws.receive()
                if message.type == aiohttp.WSMsgType.BINARY:
                    data += message.data
                elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                    break
    except TimeoutError:
        pass
    text = plain(bytes(data))
    if not done(text):
        pytest.fail(f"the session never showed what was awaited; it showed (last 3000 chars):\n{text[-3000:]}")
    return text


class Served:
    """``python -m pdtui ARGV`` serving the web face, in a working directory of its own (``cwd``: a test may check
    nothing was written there); :meth:`stop` (and the ``with`` exit) ends it by PID.

    On a failed test the ``with`` exit asks it to stop (Ctrl-C), kills it if it does not, and then
    stops the units of the demo's ``sandbox`` by their PIDs: they run detached from it.
    """

    def __init__(self, argv: list[str], log_dir: Path, sandbox: Path | None = None) -> None:
        self.argv = [*argv, "--sandbox", str(sandbox)] if sandbox is not None else argv
        self.sandbox = sandbox
        self.err_path = log_dir / "served.err"
        self.cwd = log_dir / "served-cwd"
        self.lines: list[str] = []
        self.proc: subprocess.Popen | None = None
        self._url_seen = threading.Event()
        self.started_at = 0.0

    def __enter__(self) -> Served:
        self.started_at = time.monotonic()
        self.cwd.mkdir(exist_ok=True)
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "pdtui", *self.argv], stdout=subprocess.PIPE,
                                         stderr=err, stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                                         cwd=self.cwd)
        threading.Thread(target=self._read, daemon=True).start()
        if not self._url_seen.wait(START_WAIT):
            self.kill()
            pytest.fail(f"no URL printed within {START_WAIT}s; stderr:\n{self.stderr()}")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.pid, signal.SIGINT)
                self.proc.wait(STOP_WAIT)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        finally:
            self.kill()
            if self.sandbox is not None and self.sandbox.exists():
                Sandbox(self.sandbox).stop_all()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if URL.search(line):
                self._url_seen.set()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def url(self) -> str:
        return next(found.group(1) for line in self.lines if (found := URL.search(line)))

    @property
    def port(self) -> int:
        return int(next(found.group(2) for line in self.lines if (found := URL.search(line))))

    @property
    def token(self) -> str | None:
        return next(found.group(3) for line in self.lines if (found := URL.search(line)))

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    def stop(self, sig: int = signal.SIGINT, group: bool = True) -> int:
        """Ctrl-C as a terminal sends it (to the process group), or ``sig`` to the server alone; its exit code."""
        assert self.proc is not None
        if group:
            os.killpg(self.pid, sig)
        else:
            os.kill(self.pid, sig)
        try:
            return self.proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the server did not stop within {STOP_WAIT}s of {signal.Signals(sig).name}")

    def kill(self) -> None:
        """Last resort (a failed test): SIGKILL the server's process group."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made now (PEM files in ``folder``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path
