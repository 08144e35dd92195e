"""HTTP probes through a Host's own TCP connections.

A connection is :meth:`Host.open_tcp`, so a probe of a remote port travels
through the host's SSH connection (a service bound to 127.0.0.1 over there
is reachable, and the host needs no curl). A port elsewhere (a job's, on its
node) is reached the same way, from the host that reaches it: the URL's
address is handed to the host's connect.

httptools (llhttp, Node's HTTP parser) reads the answers: framing, chunks,
keep-alive; this module writes the requests (a line and a few headers), moves
the bytes and keeps a port's idle connections for the next probe. A probe is a
handful of small requests to a few ports, so that is all the pooling it needs:
a general pool (httpcore's, with anyio's locks and cancel scopes around every
request, on h11's pure-Python state machine) costs several times as much per
request, and a fleet's readiness burst is 900 of them (bench/http_probe.py).
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import httptools

from pdtui.hosts.base import LOOPBACK_ADDRESS, READ_SIZE, Host, HostError, TcpReader, TcpWriter

DEFAULT_TIMEOUT = 5.0
CLOSE_TIMEOUT = 2.0         # closing the kept connections at the end, after which they are aborted
MAX_REQUESTS = 8            # in flight at once per host, as many as a host's services are probed at once
KEPT_PER_PORT = 2           # idle connections kept per port
MAX_BODY = 8 << 20          # an answer larger than this is a broken server, not a probe's answer
MAX_HEAD = 64 << 10         # so are headers (and interim answers) larger than this: the parser keeps them whole
NO_ANSWER = "no answer within"   # how a request that timed out is told (HttpResult.timed_out reads it)

OWN_MARK = "from=pdtui"
"""Put in the query of the requests pdtui repeats at a server (its health watch, its figures): their lines in the
server's access log say whose they are, and pdtui folds them out of the panels (:func:`own_echo`)."""
_OWN_ECHO = re.compile(r'[?&]from=pdtui(?:&[^" ]*)? HTTP/[0-9.]+" [23][0-9][0-9]\b')


def marked(path: str) -> str:
    """``path`` with pdtui's mark in its query: the server answers it as it would ``path``."""
    return f"{path}{'&' if '?' in path else '?'}{OWN_MARK}"


def own_echo(line: str) -> bool:
    """An access-log line of one of pdtui's own marked requests that was answered (``"GET /health?from=pdtui
    HTTP/1.1" 200 OK``): pdtui's echo, not the server's news. One that failed is news, and stays."""
    return OWN_MARK in line and _OWN_ECHO.search(line) is not None


class _Unanswered(Exception):
    """The peer closed a connection before any byte of its answer: on a kept connection, asked once more."""


class _Broken(Exception):
    """An answer that is not HTTP, is cut short, or is too large."""


class _Answer:
    """httptools' callbacks for one answer: its body, whether it is complete, whether its length is known."""

    __slots__ = ("body", "complete", "headers_done", "framed", "parser", "status", "keep")

    def __init__(self) -> None:
        self.body = bytearray()
        self.complete = self.headers_done = self.framed = self.keep = False
        self.status = 0
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

    def done(self) -> None:
        """The parser holds this answer's callbacks, and the answer the parser: let go of it once read, and both are
        freed at once rather than left to the garbage collector (a fleet's bring-up asks thousands of them)."""
        self.parser = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        """The status and whether the connection may be kept are read now: llhttp forgets them for the next."""
        assert self.parser is not None
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:        # an interim answer (103 Early Hints): the answer follows
            self.body.clear()
            self.headers_done = self.framed = False
            return
        self.keep = self.parser.should_keep_alive()
        self.complete = True


def _request(method: str, target: str, headers: list[tuple[str, str]], content: bytes) -> bytes:
    """The request's bytes. Its parts come from the config and the engine, never from a server; a part
    that would break the request's framing (a space or a line break in the path) is refused, not sent."""
    lines = [f"{method} {target} HTTP/1.1", *(f"{name}: {value}" for name, value in headers)]
    if not all(line.isascii() and line.isprintable() for line in lines) or " " in target:
        raise _Broken(f"cannot ask for {target!r}: not a plain URL path")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + content


class _Connection:
    """One TCP connection through the host. httptools (llhttp, Node's parser) reads the answers."""

    __slots__ = ("reader", "writer", "keep")

    def __init__(self, reader: TcpReader, writer: TcpWriter) -> None:
        self.reader, self.writer = reader, writer
        self.keep = False       # the last answer left the connection fit for another request

    def stale(self) -> bool:
        """The peer closed it while it sat idle (a server's keep-alive timeout)."""
        return self.reader.at_eof()

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send one request and read its whole answer: status and body."""
        self.keep = False
        try:
            self.writer.write(request)
            await self.writer.drain()
            chunk = await self.reader.read(READ_SIZE)
        except ConnectionError as exc:
            raise _Unanswered(str(exc) or type(exc).__name__) from None
        if not chunk:
            raise _Unanswered("the server closed the connection without answering")
        answer = _Answer()
        try:
            return await self._read(answer, chunk)
        finally:
            answer.done()

    async def _read(self, answer: _Answer, chunk: bytes) -> tuple[int, bytes]:
        """The answer's bytes fed to its parser from ``chunk`` on, until it is whole."""
        parser = answer.parser
        assert parser is not None
        head = 0
        while True:
            try:
                parser.feed_data(chunk)
            except httptools.HttpParserUpgrade:
                raise _Broken("the server switched protocols") from None
            except httptools.HttpParserError as exc:
                raise _Broken(f"not an HTTP answer ({exc})") from None
            if not answer.headers_done and (head := head + len(chunk)) > MAX_HEAD:
                raise _Broken(f"answer headers larger than {MAX_HEAD >> 10} KiB")
            if len(answer.body) > MAX_BODY:
                raise _Broken(f"an answer larger than {MAX_BODY >> 20} MiB")
            if answer.complete:
                self.keep = answer.keep
                return answer.status, bytes(answer.body)
            chunk = await self.reader.read(READ_SIZE)
            if not chunk:
                if answer.headers_done and not answer.framed:     # a body that lasts until the server closes
                    return parser.get_status_code(), bytes(answer.body)
                raise _Broken("the server closed the connection mid-answer")

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True, slots=True)
class HttpResult:
    status: int | None          # None: no HTTP answer at all
    body: bytes
    latency: float              # seconds
    error: str = ""             # why there was no answer

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def timed_out(self) -> bool:
        """No answer came within the request's timeout (it was connected, or waiting its turn or to connect)."""
        return self.status is None and self.error.startswith(NO_ANSWER)

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def describe(self, limit: int = 160) -> str:
        """One line for the user: status and an excerpt of the body, or the error."""
        if self.status is None:
            return self.error
        excerpt = self.body[:limit].decode(errors="replace").replace("\n", " ").strip()
        return f"HTTP {self.status}" + (f": {excerpt}" if excerpt else "")


class _CannotConnect(Exception):
    pass


class HttpProber:
    """HTTP requests to ports of one host, reusing connections between probes.

    A request's timeout covers all of it: waiting its turn, connecting, sending, the whole answer.
    """

    def __init__(self, host: Host) -> None:
        self._host = host
        self._kept: dict[tuple[str, int], list[_Connection]] = {}
        self._turns = asyncio.Semaphore(MAX_REQUESTS)
        self._auth: list[tuple[str, str]] = []

    def with_key(self, key: str | None) -> HttpProber:
        """This prober sending ``key`` as a bearer token with every request (a router's API key), on the same
        connections and turns; itself without a key."""
        if not key:
            return self
        keyed = copy.copy(self)
        keyed._auth = [("Authorization", f"Bearer {key}")]
        return keyed

    async def request(self, method: str, port: int, path: str, *, body: Any = None,
                      timeout: float = DEFAULT_TIMEOUT, address: str = LOOPBACK_ADDRESS) -> HttpResult:
        origin = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"    # an IPv6 address in brackets
        headers = [("Host", origin), *self._auth]
        content = b""
        if body is not None:
            content = json.dumps(body).encode()
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(content)))]
        started = time.perf_counter()
        try:
            request = _request(method, path, headers, content)
            async with asyncio.timeout(timeout), self._turns:
                status, answer = await self._ask((address, port), request)
        except TimeoutError:
            return HttpResult(None, b"", time.perf_counter() - started, f"{NO_ANSWER} {timeout:g}s")
        except _CannotConnect as exc:
            return HttpResult(None, b"", time.perf_counter() - started, f"cannot connect: {exc}")
        except (OSError, EOFError, _Broken, _Unanswered) as exc:
            return HttpResult(None, b"", time.perf_counter() - started,
                              f"connection error: {str(exc) or type(exc).__name__}")
        return HttpResult(status, answer, time.perf_counter() - started)

    async def get(self, port: int, path: str, *, timeout: float = DEFAULT_TIMEOUT,
                  address: str = LOOPBACK_ADDRESS) -> HttpResult:
        return await self.request("GET", port, path, timeout=timeout, address=address)

    async def _ask(self, origin: tuple[str, int], request: bytes) -> tuple[int, bytes]:
        """On a kept connection if there is one; once more on a fresh one if that was closed as it was asked
        (the server's keep-alive ran out as the request left: nothing was answered, so nothing is lost)."""
        kept = self._take(origin)
        if kept is not None:
            try:
                return await self._over(kept, origin, request)
            except _Unanswered:
                pass
        return await self._over(await self._connect(origin), origin, request)

    async def _over(self, connection: _Connection, origin: tuple[str, int], request: bytes) -> tuple[int, bytes]:
        """One exchange; the connection is kept after a clean answer, closed otherwise (a cancelled probe too)."""
        kept = False
        try:
            answer = await connection.exchange(request)
            kept = connection.keep and self._keep(origin, connection)
            return answer
        finally:
            if not kept:
                connection.close()

    async def _connect(self, origin: tuple[str, int]) -> _Connection:
        address, port = origin
        try:
            reader, writer = await self._host.open_tcp(port, address=address)
        except (OSError, HostError) as exc:
            raise _CannotConnect(str(exc) or type(exc).__name__) from None
        return _Connection(reader, writer)

    def _take(self, origin: tuple[str, int]) -> _Connection | None:
        kept = self._kept.get(origin)
        while kept:
            connection = kept.pop()
            if not connection.stale():
                return connection
            connection.close()
        return None

    def _keep(self, origin: tuple[str, int], connection: _Connection) -> bool:
        kept = self._kept.setdefault(origin, [])
        if len(kept) >= KEPT_PER_PORT:
            return False
        kept.append(connection)
        return True

    async def close(self) -> None:
        """Close the kept connections; one whose peer stopped reading is aborted after CLOSE_TIMEOUT."""
        connections = [c for kept in self._kept.values() for c in kept]
        self._kept.clear()
        for connection in connections:
            connection.close()
        if not connections:
            return
        waits = [asyncio.ensure_future(c.writer.wait_closed()) for c in connections]
        _, pending = await asyncio.wait(waits, timeout=CLOSE_TIMEOUT)
        for connection, wait in zip(connections, waits, strict=True):
            if wait in pending:
                wait.cancel()
                if (transport := getattr(connection.writer, "transport", None)) is not None:
                    transport.abort()
        await asyncio.gather(*waits, return_exceptions=True)   # a peer that reset as it closed is no news
