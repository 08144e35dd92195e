"""HTTP probes through a Host's own TCP connections.

httpcore does the HTTP; this module only gives it a network backend whose
"connect" is :meth:`Host.open_tcp`, so a probe of a remote port travels
through the host's SSH connection (a service bound to 127.0.0.1 over there
is reachable, and the host needs no curl). A port elsewhere (a job's, on its
node) is reached the same way, from the host that reaches it: the URL's
address is handed to the host's connect.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpcore

from pdtui.hosts.base import LOOPBACK_ADDRESS, Host, HostError

DEFAULT_TIMEOUT = 5.0
CLOSE_TIMEOUT = 2.0      # a stream's close, after which it is aborted


class _HostStream(httpcore.AsyncNetworkStream):
    """A connection through the host. Timeouts are ``asyncio.timeout`` blocks: Python 3.11's ``wait_for``
    loses a cancellation that comes as the read completes, and a probe cancelled then ran on for ever."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self._reader, self._writer = reader, writer

    # asyncio.timeout, not wait_for: wait_for runs the read as a task of its own, a loop turn more per read.
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("read timed out") from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._writer.write(buffer)
        try:
            async with asyncio.timeout(timeout):
                await self._writer.drain()
        except TimeoutError:
            raise httpcore.WriteTimeout("write timed out") from None

    async def aclose(self) -> None:
        """Close the stream. Its close waiter is shielded: a probe cancelled while closing must not cancel
        it for whoever closes the same connection later (the pool, at the end)."""
        self._writer.close()
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await asyncio.shield(self._writer.wait_closed())
        except TimeoutError:
            # A peer that stopped reading keeps the write buffer, and so the close, pending for ever.
            transport = getattr(self._writer, "transport", None)
            if transport is not None:
                transport.abort()
        except (OSError, EOFError):
            pass
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise       # this task is being cancelled: let it
            # else the waiter was cancelled with an earlier probe: the stream is closed all the same


class _HostBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, host: Host) -> None:
        self._host = host

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        try:
            reader, writer = await self._host.open_tcp(port, timeout=timeout, address=host)
        except (OSError, HostError) as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from None
        return _HostStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


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


class HttpProber:
    """HTTP requests to ports of one host, reusing connections between probes."""

    def __init__(self, host: Host) -> None:
        self._pool = httpcore.AsyncConnectionPool(network_backend=_HostBackend(host), max_connections=8)

    async def request(self, method: str, port: int, path: str, *, body: Any = None,
                      timeout: float = DEFAULT_TIMEOUT, address: str = LOOPBACK_ADDRESS) -> HttpResult:
        origin = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"    # an IPv6 address in brackets
        headers = [(b"Host", origin.encode())]
        content = b""
        if body is not None:
            content = json.dumps(body).encode()
            headers.append((b"Content-Type", b"application/json"))
        started = time.perf_counter()
        try:
            response = await self._pool.request(
                method, f"http://{origin}{path}", headers=headers, content=content,
                extensions={"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}})
        except httpcore.TimeoutException:
            return HttpResult(None, b"", time.perf_counter() - started, f"no answer within {timeout:g}s")
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            what = "cannot connect" if isinstance(exc, httpcore.ConnectError) else "connection error"
            return HttpResult(None, b"", time.perf_counter() - started, f"{what}: {exc}")
        return HttpResult(response.status, response.content, time.perf_counter() - started)

    async def get(self, port: int, path: str, *, timeout: float = DEFAULT_TIMEOUT,
                  address: str = LOOPBACK_ADDRESS) -> HttpResult:
        return await self.request("GET", port, path, timeout=timeout, address=address)

    async def close(self) -> None:
        await self._pool.aclose()
