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


class LocalHost:
    """Runs argvs on this machine. No shell is involved anywhere."""

    def __init__(self, name: str = "local") -> None:
        self.name = name

    async def run(self, argv: Sequence[str], *, timeout: float | None = None, read_only: bool = False,
                  input: bytes | None = None) -> Result:
        """``argv`` in a process of its own: a local process costs too little for reads to share one."""
        proc = await self._spawn(argv, stdout=asyncio.subprocess.PIPE, stdin_data=input is not None)
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate(input)
        except TimeoutError:
            _kill_group(proc)
            await proc.wait()
            raise HostTimedOut.after(self.name, argv, timeout) from None
        except asyncio.CancelledError:
            _kill_group(proc)
            await proc.wait()
            raise
        return Result(tuple(argv), proc.returncode or 0,
                      out.decode(errors="replace"), err.decode(errors="replace"))

    @asynccontextmanager
    async def stream(self, argv: Sequence[str]) -> AsyncIterator[StreamLines]:
        proc = await self._spawn(argv, stdout=asyncio.subprocess.PIPE)
        lines = StreamLines(proc)
        try:
            yield lines
        finally:
            if proc.returncode is None:
                _kill_group(proc)
            await proc.wait()
            await lines.finish()

    async def open_tcp(self, port: int, *, timeout: float | None = None, address: str = LOOPBACK_ADDRESS):
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.open_connection(address, port, limit=STREAM_LIMIT)
        except TimeoutError:
            raise ConnectionError(f"connecting to {address}:{port} timed out") from None

    async def close(self) -> None:
        return None

    async def _spawn(self, argv: Sequence[str], *, stdout: int, stdin_data: bool = False) -> asyncio.subprocess.Process:
        if not argv:
            raise HostError(f"{self.name}: empty command")
        try:
            return await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if stdin_data else asyncio.subprocess.DEVNULL, stdout=stdout,
                stderr=asyncio.subprocess.PIPE, limit=STREAM_LIMIT, start_new_session=True)
        except OSError as exc:
            raise HostError(f"{self.name}: cannot run {argv[0]}: {exc.strerror or exc}") from None


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


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """Stop a command and anything it started (it runs in its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
