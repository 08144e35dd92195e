"""The Host protocol: how pdtui reaches a machine.

A host runs an argv to completion, streams the output lines of a long-running
argv (a ``journalctl -f``, an ``nvidia-smi -lms``), and opens TCP connections to
ports on itself (HTTP probes). The local host does this with subprocesses; the
SSH host with channels on one connection. The engine only sees this protocol.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable
import asyncio


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


class HostError(Exception):
    """The host could not run a command at all (not: the command failed).

    Its message is one line naming the host, fit to show the user as is.
    """


class HostUnreachable(HostError):
    """No connection could be made (refused, no route, name not resolved, timed out): may pass."""


class HostDisconnected(HostError):
    """The connection dropped under a running command or stream.

    The command's fate is unknown, so it is never retried behind the caller's
    back; the next use of the host connects again.
    """


class HostKeyUnknown(HostError):
    """The host's key is in no known_hosts file; the user may accept it (``--accept-new``)."""


class HostKeyChanged(HostError):
    """The host offers a key other than the one on record: always refused."""


@runtime_checkable
class Host(Protocol):
    name: str

    async def run(self, argv: Sequence[str], *, timeout: float | None = None) -> Result:
        """Run ``argv`` to completion. Raises HostError if it cannot be run or times out."""
        ...

    def stream(self, argv: Sequence[str]) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Run ``argv`` and yield its stdout lines (bytes, without the newline).

        Use as ``async with host.stream(argv) as lines: async for line in lines``.
        Leaving the block stops the command. The iterator ends when the command exits.
        """
        ...

    async def open_tcp(self, port: int, *, timeout: float | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to ``port`` on this host (127.0.0.1 as the host sees it)."""
        ...

    async def close(self) -> None:
        ...
