"""The Host protocol: how pdtui reaches a machine.

A host runs an argv to completion, streams the output lines of a long-running
argv (a ``journalctl -f``, an ``nvidia-smi -lms``), and opens TCP connections to
ports on itself, or on machines it reaches (a cluster's login host, the nodes
of its jobs): HTTP probes. The local host does this with subprocesses; the
SSH host with channels on one connection. The engine only sees this protocol.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

READ_SIZE = 256 * 1024
"""Bytes asked for per read of a stream: a burst of journal lines arrives in a few reads."""
MAX_LINE = 16 * 1024 * 1024
"""A line longer than this is handed over in pieces rather than held in memory whole."""
STDERR_KEEP = 4096
"""Bytes of a command's stderr kept for its error message (the end, where the reason is)."""
LOOPBACK_ADDRESS = "127.0.0.1"
"""Where a host's own services are reached from the host: a unit's ports (a job's are on its node's address)."""


@dataclass(frozen=True, slots=True)
class Result:
    """A finished command."""

    argv: tuple[str, ...]
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def last_words(self) -> str:
        """What it said last (its stderr's last line, else its stdout's), or its exit status: why it failed."""
        lines = [line.strip() for line in (self.stderr or self.stdout).splitlines() if line.strip()]
        return lines[-1] if lines else f"exit status {self.exit_status}"


StatusCallback = Callable[[str, str, str], None]
"""How a host tells its connection status: (host name, status, detail)."""


class HostError(Exception):
    """The host could not run a command at all (not: the command failed).

    Its message is one line naming the host, fit to show the user as is.
    """


class HostUnreachable(HostError):
    """No connection could be made (refused, no route, timed out): may pass, so it is tried again."""


class HostNotFound(HostError):
    """The host's name does not resolve: a typo in the config, which no retry mends.

    Final: the host is not looked up again, every later use fails at once with the same line.
    """


class HostDisconnected(HostError):
    """The connection dropped under a running command or stream.

    The command's fate is unknown, so it is never retried behind the caller's
    back; the next use of the host connects again.
    """


class HostTimedOut(HostError):
    """A command that did not finish within its timeout, and was stopped: a loaded host answers late (a machine
    loading weights on every core), or the command hangs. What it would have said is unknown; a look may be tried
    again."""

    @classmethod
    def after(cls, host: str, argv: Sequence[str], timeout: float | None) -> HostTimedOut:
        """``argv`` stopped on ``host`` at ``timeout`` (a command without one never times out: it names none)."""
        within = f" within {timeout:g}s" if timeout is not None else ""
        return cls(f"{host}: {argv[0]} did not finish{within}")


UNANSWERED = (HostUnreachable, HostDisconnected, HostTimedOut)
"""How a look at a service can fail without telling anything about it: it is looked at again on its beat."""


class HostKeyUnknown(HostError):
    """The host's key is in no known_hosts file; the user may accept it (``--accept-new``)."""


class HostKeyChanged(HostError):
    """The host offers a key other than the one on record: always refused."""


@runtime_checkable
class TcpReader(Protocol):
    """The reading end of a TCP connection a host opened (asyncio's or asyncssh's)."""

    async def read(self, n: int = -1) -> bytes: ...

    def at_eof(self) -> bool: ...


class TcpWriter(Protocol):
    """The writing end of a TCP connection a host opened (asyncio's or asyncssh's)."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


@runtime_checkable
class Host(Protocol):
    name: str

    async def run(self, argv: Sequence[str], *, timeout: float | None = None, read_only: bool = False,
                  input: bytes | None = None) -> Result:
        """Run ``argv`` to completion. Raises HostError if it cannot be run or times out.

        ``read_only``: the command changes nothing (a look, a read of files or the journal), so the host may run
        it in one remote command with the other reads asked at the same moment (an SSH host does:
        hosts/shared_reads.py); its Result is its own all the same.
        ``input``: what the command reads on its stdin (else it reads nothing): how a file's content (a secret)
        reaches a command without being a word of its argv, which ``ps`` shows every user.
        """
        ...

    def stream(self, argv: Sequence[str]) -> AbstractAsyncContextManager[Lines]:
        """Run ``argv`` and yield its stdout lines (bytes, without the newline).

        Use as ``async with host.stream(argv) as lines: async for line in lines``, or
        ``async for batch in lines.batches()`` for every complete line that arrived at once.
        Leaving the block stops the command. The iterator ends when the command exits.
        """
        ...

    async def open_tcp(self, port: int, *, timeout: float | None = None,
                       address: str = LOOPBACK_ADDRESS) -> tuple[TcpReader, TcpWriter]:
        """Connect to ``address:port`` as this host sees it (by default a port of its own)."""
        ...

    async def close(self) -> None:
        ...


class Lines(Protocol):
    """The stdout of a streamed command, line by line or in batches of the lines that arrived together."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def batches(self) -> AsyncIterator[list[bytes]]: ...


async def line_batches(read: Callable[[int], Awaitable[bytes]]) -> AsyncIterator[list[bytes]]:
    """Split what ``read`` returns into complete lines, one list per read.

    Reading a burst in large pieces and splitting it at once costs a fraction of
    awaiting each line: the journal tail of a busy backend sees tens of thousands
    of lines a second. A last line without a newline is delivered at the end.
    """
    partial = b""
    while chunk := await read(READ_SIZE):
        lines = (partial + chunk if partial else chunk).split(b"\n")
        partial = lines.pop()
        if len(partial) > MAX_LINE:
            lines.append(partial)
            partial = b""
        if lines:
            yield lines
    if partial:
        yield [partial]


async def each_line(batches: AsyncIterator[list[bytes]]) -> AsyncIterator[bytes]:
    """The lines of ``batches`` one by one."""
    async for batch in batches:
        for line in batch:
            yield line


async def last_bytes(read: Callable[[int], Awaitable[bytes]], keep: int = STDERR_KEEP,
                     errors: tuple[type[BaseException], ...] = ()) -> bytes:
    """Read to the end, keeping only the last ``keep`` bytes.

    Draining stderr this way means a command never blocks on a full pipe or
    channel, and a chatty one cannot fill memory. ``errors`` end the reading
    quietly (a dropped connection), with what was kept so far.
    """
    kept = b""
    try:
        while chunk := await read(65536):
            kept = (kept + chunk)[-keep:]
    except errors:
        pass
    return kept
