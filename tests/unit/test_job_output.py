"""A job's output follower (pdtui/targets/slurm/job_output.py): every line once and in order, also across a broken
stream, as the job's invocation; hostile bytes stay data."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pdtui.engine.log_entry import LogEntry
from pdtui.hosts.base import HostDisconnected
from pdtui.targets.slurm.job_output import JobOutput
from tests.engine_helpers import ScriptedLines


class _Host:
    """Streams the given batches once per call; the first stream breaks (the connection dropped)."""

    name = "login"

    def __init__(self, streams: list[list[list[bytes]]]) -> None:
        self.streams = streams
        self.argvs: list[list[str]] = []

    @asynccontextmanager
    async def stream(self, argv: list[str]) -> AsyncIterator[ScriptedLines]:
        self.argvs.append(list(argv))
        if not self.streams:
            await asyncio.Event().wait()          # nothing more: a tail that waits for lines
        batches = self.streams.pop(0)
        yield ScriptedLines(batches)
        if len(self.argvs) == 1:
            raise HostDisconnected("login: connection lost")


async def test_lines_come_once_in_order_across_a_broken_stream_and_stay_data() -> None:
    host = _Host([[[b"first", b"second\r"]], [[b"third \xff\x1b[2J", b""]]])
    got: list[LogEntry] = []
    output = JobOutput(host, "/o/pd-decode-12.out", "12", got.append, clock=lambda: 5.0)   # type: ignore[arg-type]
    task = asyncio.create_task(output.run())
    assert await output.caught_up(4, timeout=5.0)
    task.cancel()
    assert [e.message for e in got] == ["first", "second", "third \ufffd\x1b[2J", ""]
    assert [(e.cursor, e.invocation, e.realtime, e.source, e.system) for e in got[:2]] == [
        ("12:1", "12", 5.0, None, False), ("12:2", "12", 5.0, None, False)]
    assert [argv[-2:] for argv in host.argvs[:2]] == [["+1", "/o/pd-decode-12.out"], ["+3", "/o/pd-decode-12.out"]]


async def test_caught_up_says_when_the_lines_never_came() -> None:
    output = JobOutput(_Host([]), "/o/x.out", "1", lambda entry: None)   # type: ignore[arg-type]
    assert not await output.caught_up(1, timeout=0.05)
