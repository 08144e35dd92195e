"""The local host: commands are asyncio subprocesses on this machine, TCP goes to 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from pdtui.hosts.base import LOOPBACK_ADDRESS, MAX_LINE, HostError, HostTimedOut, Result, each_line, last_bytes, line_batches

STREAM_LIMIT = MAX_LINE
"""asyncio's stream buffer limit: the longest line a ``readuntil`` (an HTTP header, say) may take."""
STOP_GRACE = 5.0
"""Seconds a stopped command has to end on SIGTERM before its group gets SIGKILL."""


class LocalHost:
    """Runs argvs on this machine. No shell is involved anywhere."""

    def __init__(self, name: str = "local") -> None:
        self.name = name
        self._running: set[asyncio.subprocess.Process] = set()

    async def run(self, argv: Sequence[str], *, timeout: float | None = None, read_only: bool = False,
                  input: bytes | None = None) -> Result:
        """``argv`` in a process of its own: a local process costs too little for reads to share one."""
        proc = await self._spawn(argv, stdout=asyncio.subprocess.PIPE, stdin_data=input is not None)
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate(input)
        except TimeoutError:
            await _stopped(proc)
            raise HostTimedOut.after(self.name, argv, timeout) from None
        except asyncio.CancelledError:
            await _stopped(proc)
            raise
        finally:
            self._running.discard(proc)
        return Result(tuple(argv), proc.returncode or 0,
                      out.decode(errors="replace"), err.decode(errors="replace"))

    @asynccontextmanager
    async def stream(self, argv: Sequence[str]) -> AsyncIterator[StreamLines]:
        proc = await self._spawn(argv, stdout=asyncio.subprocess.PIPE)
        lines = StreamLines(proc)
        try:
            yield lines
        finally:
            await _stopped(proc)
            self._running.discard(proc)
            await lines.finish()

    async def open_tcp(self, port: int, *, timeout: float | None = None, address: str = LOOPBACK_ADDRESS):
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.open_connection(address, port, limit=STREAM_LIMIT)
        except TimeoutError:
            raise ConnectionError(f"connecting to {address}:{port} timed out") from None

    async def close(self) -> None:
        """Stop and reap every command still running: one the event loop never reaped would outlive it."""
        running, self._running = list(self._running), set()
        await asyncio.gather(*(_stopped(proc) for proc in running))

    async def _spawn(self, argv: Sequence[str], *, stdout: int, stdin_data: bool = False) -> asyncio.subprocess.Process:
        if not argv:
            raise HostError(f"{self.name}: empty command")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if stdin_data else asyncio.subprocess.DEVNULL, stdout=stdout,
                stderr=asyncio.subprocess.PIPE, limit=STREAM_LIMIT, start_new_session=True)
        except OSError as exc:
            raise HostError(f"{self.name}: cannot run {argv[0]}: {exc.strerror or exc}") from None
        self._running.add(proc)
        return proc


class StreamLines:
    """The stdout lines of a running command; after the end, its exit status and stderr tail."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        assert proc.stdout is not None and proc.stderr is not None   # started with both piped
        self._stderr = asyncio.ensure_future(last_bytes(proc.stderr.read))
        self.exit_status: int | None = None
        self.stderr = ""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return each_line(self.batches())

    def batches(self) -> AsyncIterator[list[bytes]]:
        assert self._proc.stdout is not None
        return line_batches(self._proc.stdout.read)

    async def finish(self) -> None:
        self.exit_status = await self._proc.wait()
        self.stderr = (await self._stderr).decode(errors="replace").strip()


async def _stopped(proc: asyncio.subprocess.Process) -> None:
    """Stop a command and anything it started (it runs in a session of its own), and wait for its end however often
    the waiter is cancelled meanwhile: a command the event loop never reaped outlives the loop, and asyncio's child
    watcher complains of it on stderr when it ends."""
    ending = asyncio.ensure_future(_end(proc))
    cancelled = False
    while not ending.done():
        try:
            await asyncio.shield(ending)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    ending.result()


async def _end(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    _signal_group(proc, signal.SIGTERM)
    try:
        async with asyncio.timeout(STOP_GRACE):
            await proc.wait()
    except TimeoutError:
        _signal_group(proc, signal.SIGKILL)
        await proc.wait()


def _signal_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
