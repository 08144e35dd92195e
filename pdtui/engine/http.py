"""HTTP probes through a Host's own TCP connections.

A connection is :meth:`Host.open_tcp`, so a probe of a remote port travels
through the host's SSH connection (a service bound to 127.0.0.1 over there
is reachable, and the host needs no curl). A port elsewhere (a job's, on its
node) is reached the same way, from the host that reaches it: the URL's
address is handed to the host's connect.

h11 speaks HTTP/1.1 (framing, parsing, keep-alive rules); this module only
moves its bytes and keeps a port's idle connections for the next probe.
A probe is a handful of small requests to a few ports, so that is all the
pooling it needs: a general pool (httpcore's, with anyio's locks and cancel
scopes around every request) costs 3.5 times as much per request, and a
fleet's readiness burst is 900 of them (bench/http_probe.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import h11

from pdtui.hosts.base import LOOPBACK_ADDRESS, READ_SIZE, Host, HostError, TcpReader, TcpWriter

DEFAULT_TIMEOUT = 5.0
CLOSE_TIMEOUT = 2.0         # closing the kept connections at the end, after which they are aborted
MAX_REQUESTS = 8            # in flight at once per host, as many as a host's services are probed at once
KEPT_PER_PORT = 2           # idle connections kept per port
MAX_BODY = 8 << 20          # an answer larger than this is a broken server, not a probe's answer


class _Unanswered(Exception):
    """The peer closed a connection before any byte of its answer: on a kept connection, asked once more."""


class _Connection:
    """One TCP connection through the host and its HTTP/1.1 state."""

    __slots__ = ("reader", "writer", "http")

    def __init__(self, reader: TcpReader, writer: TcpWriter) -> None:
        self.reader, self.writer = reader, writer
        self.http = h11.Connection(h11.CLIENT)

    def stale(self) -> bool:
        """The peer closed it while it sat idle (a server's keep-alive timeout)."""
        return self.reader.at_eof()

    async def exchange(self, method: str, target: str, headers: list[tuple[str, str]],
                       content: bytes) -> tuple[int, bytes]:
        """Send one request and read its whole answer: status and body."""
        http = self.http
        data = http.send(h11.Request(method=method, target=target, headers=headers))
        if content:
            data += http.send(h11.Data(data=content))
        try:
            self.writer.write(data + http.send(h11.EndOfMessage()))
            await self.writer.drain()
            chunk = await self.reader.read(READ_SIZE)
        except ConnectionError as exc:
            raise _Unanswered(str(exc) or type(exc).__name__) from None
        if not chunk:
            raise _Unanswered("the server closed the connection without answering")
        http.receive_data(chunk)
        status, body = None, bytearray()
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                http.receive_data(await self.reader.read(READ_SIZE))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    raise h11.RemoteProtocolError(f"an answer larger than {MAX_BODY >> 20} MiB")
            elif isinstance(event, h11.EndOfMessage):
                assert status is not None       # h11 gives the response before its end
                return status, bytes(body)
            elif isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("the server closed the connection mid-answer")
            # else an h11.InformationalResponse (100 Continue): the answer follows

    def reusable(self) -> bool:
        """After an answer: both ends are done and neither asked to close; ready for the next request."""
        if self.http.our_state is h11.DONE and self.http.their_state is h11.DONE:
            self.http.start_next_cycle()
            return True
        return False

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

    async def request(self, method: str, port: int, path: str, *, body: Any = None,
                      timeout: float = DEFAULT_TIMEOUT, address: str = LOOPBACK_ADDRESS) -> HttpResult:
        origin = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"    # an IPv6 address in brackets
        headers = [("Host", origin)]
        content = b""
        if body is not None:
            content = json.dumps(body).encode()
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(content)))]
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout), self._turns:
                status, answer = await self._ask((address, port), method, path, headers, content)
        except TimeoutError:
            return HttpResult(None, b"", time.perf_counter() - started, f"no answer within {timeout:g}s")
        except _CannotConnect as exc:
            return HttpResult(None, b"", time.perf_counter() - started, f"cannot connect: {exc}")
        except (OSError, EOFError, h11.ProtocolError, _Unanswered) as exc:
            return HttpResult(None, b"", time.perf_counter() - started,
                              f"connection error: {str(exc) or type(exc).__name__}")
        return HttpResult(status, answer, time.perf_counter() - started)

    async def get(self, port: int, path: str, *, timeout: float = DEFAULT_TIMEOUT,
                  address: str = LOOPBACK_ADDRESS) -> HttpResult:
        return await self.request("GET", port, path, timeout=timeout, address=address)

    async def _ask(self, origin: tuple[str, int], method: str, path: str, headers: list[tuple[str, str]],
                   content: bytes) -> tuple[int, bytes]:
        """On a kept connection if there is one; once more on a fresh one if that was closed as it was asked
        (the server's keep-alive ran out as the request left: nothing was answered, so nothing is lost)."""
        kept = self._take(origin)
        if kept is not None:
            try:
                return await self._over(kept, origin, method, path, headers, content)
            except _Unanswered:
                pass
        return await self._over(await self._connect(origin), origin, method, path, headers, content)

    async def _over(self, connection: _Connection, origin: tuple[str, int], method: str, path: str,
                    headers: list[tuple[str, str]], content: bytes) -> tuple[int, bytes]:
        """One exchange; the connection is kept after a clean answer, closed otherwise (a cancelled probe too)."""
        kept = False
        try:
            answer = await connection.exchange(method, path, headers, content)
            kept = connection.reusable() and self._keep(origin, connection)
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
