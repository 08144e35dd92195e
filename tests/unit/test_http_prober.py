"""The HTTP prober: requests through a host's own connections, kept between probes, every failure one line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from pdtui.hosts import http
from pdtui.hosts.http import HttpProber, marked, own_echo
from pdtui.hosts.local import LocalHost

Handler = Callable[["Server", asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Server:
    """A scripted HTTP server on 127.0.0.1: ``handle(server, reader, writer, n)`` serves its n-th connection."""

    def __init__(self, handle: Handler) -> None:
        self.handle = handle
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()      # a connection's peer (the prober) closed it

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handle(self, reader, writer, self.connections)
        finally:
            writer.close()

    async def request(self, reader: asyncio.StreamReader) -> bytes | None:
        """The next request's head and body (None at the end of the connection)."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.closed.set()
            return None
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        whole = head + await reader.readexactly(length)
        self.requests.append(whole)
        return whole


def answer(body: bytes = b"ok", status: int = 200, extra: str = "") -> bytes:
    return f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body


@asynccontextmanager
async def serving(handle: Handler) -> AsyncIterator[tuple[Server, HttpProber, int]]:
    server = Server(handle)
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    prober = HttpProber(LocalHost())
    try:
        yield server, prober, port
    finally:
        await prober.close()
        listener.close()
        await listener.wait_closed()


async def keep_alive(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    while await server.request(reader) is not None:
        writer.write(answer(f"answer on connection {n}".encode()))


async def test_a_second_probe_of_a_port_reuses_the_connection():
    async with serving(keep_alive) as (server, prober, port):
        first = await prober.get(port, "/health")
        second = await prober.get(port, "/health")
    assert (first.status, first.body) == (200, b"answer on connection 1")
    assert (second.status, second.body) == (200, b"answer on connection 1")
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET /health HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{port}".encode() in server.requests[0].lower()


async def test_a_connection_the_server_closed_while_idle_is_not_reused():
    async def once(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        writer.write(answer(f"connection {n}".encode()))   # no "connection: close", and then closed
    async with serving(once) as (server, prober, port):
        await prober.get(port, "/health")
        for _ in range(20):
            await asyncio.sleep(0.01)           # the close reaches the prober's side
        second = await prober.get(port, "/health")
    assert (second.status, second.body) == (200, b"connection 2")


async def test_a_kept_connection_closed_as_the_request_leaves_is_asked_again_on_a_fresh_one():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        writer.write(answer(f"connection {n}".encode()))
        if n == 1:
            await server.request(reader)        # the second request arrives: closed unanswered
    async with serving(handle) as (server, prober, port):
        await prober.get(port, "/a")
        second = await prober.get(port, "/b")
    assert (second.status, second.body) == (200, b"connection 2")
    assert [r.split(b" ")[1] for r in server.requests] == [b"/a", b"/b", b"/b"]


async def test_a_fresh_connection_closed_unanswered_is_a_connection_error():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
    async with serving(handle) as (server, prober, port):
        result = await prober.get(port, "/health")
    assert result.status is None
    assert result.error == "connection error: the server closed the connection without answering"
    assert server.connections == 1


async def test_an_answer_cut_short_is_a_connection_error():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        writer.write(answer(b"0123456789")[:-4])
    async with serving(handle) as (server, prober, port):
        result = await prober.get(port, "/health")
    assert result.status is None and result.error.startswith("connection error: ")


async def test_an_answer_asking_to_close_is_not_kept():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while await server.request(reader) is not None:
            writer.write(answer(b"bye", extra="connection: close\r\n"))
    async with serving(handle) as (server, prober, port):
        await prober.get(port, "/health")
        await asyncio.wait_for(server.closed.wait(), 5)      # the prober closed it
        await prober.get(port, "/health")
    assert server.connections == 2


async def test_a_post_sends_its_json_with_its_length():
    async with serving(keep_alive) as (server, prober, port):
        result = await prober.request("POST", port, "/v1/chat/completions", body={"max_tokens": 1})
    assert result.ok
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert json.loads(body) == {"max_tokens": 1}
    assert f"content-length: {len(body)}".encode() in head.lower()
    assert b"content-type: application/json" in head.lower()


def endless(first: bytes, more: bytes):
    """A server that answers ``first``, then ``more`` again and again until the prober hangs up."""
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        writer.write(first)
        while not writer.is_closing():
            writer.write(more)
            await writer.drain()
    return handle


async def test_an_answer_larger_than_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(http, "MAX_BODY", 1 << 20)
    handle = endless(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                     b"%x\r\n%s\r\n" % (64 << 10, b"x" * (64 << 10)))
    async with serving(handle) as (server, prober, port):
        result = await prober.get(port, "/metrics")
    assert result.status is None and result.error == "connection error: an answer larger than 1 MiB"


EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"


@pytest.mark.parametrize("first, more", [(b"HTTP/1.1 200 OK\r\nx-evil: ", b"a" * 4096),        # one endless value
                                         (b"HTTP/1.1 200 OK\r\n", b"x-a: b\r\n" * 512),        # endless headers
                                         (EARLY_HINTS, EARLY_HINTS * 64)],                      # endless interim answers
                         ids=["value", "headers", "interim"])
async def test_headers_that_never_end_are_refused_once_larger_than_the_limit(first: bytes, more: bytes):
    async with serving(endless(first, more)) as (server, prober, port):
        result = await prober.get(port, "/health")
    assert result.status is None and result.error == "connection error: answer headers larger than 64 KiB"


async def test_a_port_nobody_listens_on_cannot_connect():
    async with serving(keep_alive) as (server, prober, port):
        pass
    prober = HttpProber(LocalHost())
    result = await prober.get(port, "/health")      # the listener is gone
    assert result.status is None and result.error.startswith("cannot connect: ")
    await prober.close()


async def test_a_peer_that_never_answers_is_a_timeout_within_the_probe_timeout():
    async def silent(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        await server.request(reader)        # until the prober gives up and closes
    async with serving(silent) as (server, prober, port):
        result = await prober.get(port, "/health", timeout=0.1)
        await asyncio.wait_for(server.closed.wait(), 5)
    assert result.status is None and result.error == "no answer within 0.1s"


async def cancel_once_asked(server: Server, prober: HttpProber, port: int) -> None:
    """Start a probe, cancel it as soon as the server has its request; the cancellation must come through."""
    probe = asyncio.create_task(prober.get(port, "/health"))
    while not server.requests:
        await asyncio.sleep(0)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe


async def test_a_cancelled_probe_closes_its_connection_and_the_next_probe_opens_another():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        if n == 1:
            await server.request(reader)    # never answered; ends when the prober closes
        else:
            writer.write(answer(b"second"))
            await server.request(reader)
    async with serving(handle) as (server, prober, port):
        await cancel_once_asked(server, prober, port)
        await asyncio.wait_for(server.closed.wait(), 5)
        result = await prober.get(port, "/health")
    assert (result.status, result.body) == (200, b"second")
    assert server.connections == 2


async def test_a_read_cancelled_as_its_data_arrives_is_cancelled():
    """Python 3.11's wait_for returned the data and dropped the cancellation: a cancelled probe ran on for ever."""
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        writer.write(answer(b"late"))
        await server.request(reader)
    async with serving(handle) as (server, prober, port):
        await cancel_once_asked(server, prober, port)


async def test_a_chunked_answer_is_read_whole_and_the_connection_kept():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while await server.request(reader) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    async with serving(handle) as (server, prober, port):
        first = await prober.get(port, "/metrics")
        second = await prober.get(port, "/metrics")
    assert first.body == second.body == b"hello world"
    assert server.connections == 1


async def test_an_answer_without_a_length_lasts_until_the_server_closes():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it")
    async with serving(handle) as (server, prober, port):
        result = await prober.get(port, "/health")
    assert (result.status, result.body) == (200, b"all of it")


async def test_an_interim_answer_is_passed_over():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n" + answer(b"final"))
    async with serving(handle) as (server, prober, port):
        result = await prober.get(port, "/health")
    assert (result.status, result.body) == (200, b"final")


async def test_an_answer_that_is_not_http_is_a_connection_error():
    async def handle(server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n")
    async with serving(handle) as (server, prober, port):
        result = await prober.get(port, "/health")
    assert result.status is None and result.error.startswith("connection error: not an HTTP answer")


async def test_a_path_that_would_break_the_request_is_refused_unsent():
    async with serving(keep_alive) as (server, prober, port):
        result = await prober.get(port, "/health HTTP/1.1\r\nX-Injected: 1")
    assert result.status is None and result.error.startswith("connection error: cannot ask for")
    assert server.connections == 0


def test_pdtuis_mark_joins_a_paths_query_and_its_answered_echo_is_recognised():
    assert marked("/health") == "/health?from=pdtui"
    assert marked("/health_generate?x=1") == "/health_generate?x=1&from=pdtui"
    assert own_echo('[2026-12-03 10:22:51] INFO:     127.0.0.1:60690 - "GET /metrics?from=pdtui HTTP/1.1" 200 OK')
    assert own_echo('INFO:     127.0.0.1:1 - "GET /health_generate?x=1&from=pdtui HTTP/1.1" 200 OK')


def test_a_failed_answer_to_pdtui_or_anothers_request_is_no_echo():
    assert not own_echo('INFO:     127.0.0.1:60690 - "GET /health?from=pdtui HTTP/1.1" 503 Service Unavailable')
    assert not own_echo('INFO:     127.0.0.1:60690 - "GET /metrics HTTP/1.1" 200 OK')
    assert not own_echo("from=pdtui said in a line of the server's own")
