"""The HTTP probes' streams over a host connection."""

from __future__ import annotations

import asyncio

import pytest

from pdtui.engine.http import HttpProber, _HostStream


class _Writer:
    """A stream writer whose close waiter is one future, as asyncio's is per connection."""

    def __init__(self) -> None:
        self.closed = asyncio.get_running_loop().create_future()

    def close(self) -> None:
        pass

    def wait_closed(self):
        return self.closed


async def test_a_probe_cancelled_while_closing_leaves_the_close_to_the_next_closer():
    writer = _Writer()
    stream = _HostStream(None, writer)
    cancelled_probe = asyncio.create_task(stream.aclose())
    await asyncio.sleep(0)
    cancelled_probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled_probe
    assert not writer.closed.cancelled()
    later = asyncio.create_task(stream.aclose())      # the pool closing the connection at the end
    await asyncio.sleep(0)
    writer.closed.set_result(None)
    await asyncio.wait_for(later, 1)


async def test_a_read_cancelled_as_its_data_arrives_is_cancelled():
    """Python 3.11's wait_for returned the data and dropped the cancellation: a cancelled probe ran on for ever."""
    reader = asyncio.StreamReader()
    task = asyncio.create_task(_HostStream(reader, None).read(10, timeout=5))
    for _ in range(3):
        await asyncio.sleep(0)       # the read waits for data
    reader.feed_data(b"x")
    assert task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


class _Silent:
    """A peer that accepts the connection and the request, and never answers."""

    async def read(self, n: int = -1) -> bytes:
        await asyncio.Event().wait()
        return b""

    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def wait_closed(self) -> None:
        pass


class _SilentHost:
    name = "silent"

    async def open_tcp(self, port: int, *, timeout: float | None = None, address: str = "127.0.0.1"):
        peer = _Silent()
        return peer, peer


async def test_a_peer_that_never_answers_is_a_timeout_within_the_probe_timeout():
    prober = HttpProber(_SilentHost())
    result = await prober.get(30000, "/health", timeout=0.1)
    assert result.status is None and result.error == "no answer within 0.1s"
    await prober.close()
