"""HTTP probes: pdtui's prober against httpcore's connection pool, side by side on the same connections.

Both ask ``GET /health`` of seven ports of one in-memory host (the fleet bench's
connections, :class:`pdtui.sim.memhost.MemoryConnection`: no socket, no process,
so only the clients' own cost is measured), one request after another, keeping
their connections. Rounds alternate between the two clients; each figure is the
median over the rounds of a round's mean per request. ``ratio`` is httpcore's
over pdtui's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import emit, machine, parse_args  # noqa: E402
from pdtui.hosts.http import HttpProber  # noqa: E402
from pdtui.sim.memhost import MemoryConnection, Meter  # noqa: E402

PORTS = range(30000, 30007)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=3000, help="requests per round and client")
    parser.add_argument("--rounds", type=int, default=7)


def healthy(method: str, path: str, body: bytes) -> tuple[int, bytes]:
    return 200, b'{"status": "ok"}'


class OneHost:
    """A host whose every port answers 200 (the Host protocol's ``open_tcp``, as MemoryHost opens it)."""

    name = "bench"

    def __init__(self) -> None:
        self.meter = Meter()
        self.connects = 0

    async def open_tcp(self, port: int, *, timeout: float | None = None,
                       address: str = "127.0.0.1") -> tuple[MemoryConnection, MemoryConnection]:
        await asyncio.sleep(0)
        self.connects += 1
        connection = MemoryConnection(healthy, self.meter)
        return connection, connection


async def pdtui_round(requests: int) -> tuple[float, int]:
    host = OneHost()
    prober = HttpProber(host)
    started = time.perf_counter()
    for i in range(requests):
        result = await prober.get(PORTS[i % len(PORTS)], "/health")
        assert result.status == 200, result
    took = time.perf_counter() - started
    await prober.close()
    return took / requests, host.connects


async def httpcore_round(requests: int) -> tuple[float, int] | None:
    try:
        import httpcore
    except ImportError:
        return None
    memory = OneHost()

    class Stream(httpcore.AsyncNetworkStream):
        def __init__(self, connection: MemoryConnection) -> None:
            self.connection = connection

        async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return await self.connection.read(max_bytes)

        async def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.connection.write(buffer)

        async def aclose(self) -> None:
            self.connection.close()

    class Backend(httpcore.AsyncNetworkBackend):
        async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                              local_address: str | None = None, socket_options: Any = None) -> Stream:
            reader, _ = await memory.open_tcp(port)
            return Stream(reader)

        async def sleep(self, seconds: float) -> None:
            await asyncio.sleep(seconds)

    pool = httpcore.AsyncConnectionPool(network_backend=Backend(), max_connections=8)
    timeout = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
    started = time.perf_counter()
    for i in range(requests):
        port = PORTS[i % len(PORTS)]
        response = await pool.request("GET", f"http://127.0.0.1:{port}/health",
                                      headers=[(b"Host", f"127.0.0.1:{port}".encode())], extensions={"timeout": timeout})
        assert response.status == 200
    took = time.perf_counter() - started
    await pool.aclose()
    return took / requests, memory.connects


async def measure(args: argparse.Namespace) -> dict:
    ours: list[float] = []
    theirs: list[float] = []
    connects = {}
    for _ in range(args.rounds):
        per_request, connects["pdtui"] = await pdtui_round(args.requests)
        ours.append(per_request)
        other = await httpcore_round(args.requests)
        if other is not None:
            theirs.append(other[0])
            connects["httpcore"] = other[1]
    figures: dict = {"requests_per_round": args.requests, "rounds": args.rounds, "ports": len(PORTS),
                     "connections_opened_per_round": connects,
                     "pdtui_us_per_request": round(statistics.median(ours) * 1e6, 1)}
    if theirs:
        figures["httpcore_us_per_request"] = round(statistics.median(theirs) * 1e6, 1)
        figures["ratio"] = round(statistics.median(theirs) / statistics.median(ours), 2)
    else:
        figures["httpcore_us_per_request"] = "httpcore is not installed: pip install httpcore"
    return figures


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    if args.quick:
        args.requests, args.rounds = 50, 1
    emit({"machine": machine(), "quick": args.quick, **asyncio.run(measure(args))})


if __name__ == "__main__":
    main()
