"""Where a host's journal tail starts (pdtui/targets/systemd/journal_tail.py), and from when on it says it has every entry.

On a real journald (tests/integration/test_real_journal_tail.py) each start is
shown to lose none of a unit's first lines; here, with a host that plays back
what a test gives, that the tail picks the start the journal's newest entry
calls for, keeps it across a stream that broke early, and tells ``since`` only
when it holds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pdtui.engine.log_entry import LogEntry
from pdtui.hosts.base import HostError, Result
from pdtui.targets.systemd.commands import Commands
from pdtui.targets.systemd.journal_tail import RECENT, JournalTail
from tests.engine_helpers import ScriptedLines


def line(cursor: str, stamp: int, message: str = "m") -> bytes:
    return json.dumps({"__CURSOR": cursor, "__REALTIME_TIMESTAMP": str(stamp), "MESSAGE": message,
                       "_SYSTEMD_UNIT": "a.service", "_PID": "7"}).encode()


class _Host:
    """Answers the newest-entry read with ``newest`` (a Result, or a HostError raised); plays ``streams`` in turn,
    each (batches, exit status, stderr), then waits as a journalctl with nothing new does."""

    name = "gpu0"

    def __init__(self, newest: Result | HostError, streams: list[tuple[list[list[bytes]], int, str]]) -> None:
        self.newest = newest
        self.streams = streams
        self.runs = 0
        self.argvs: list[list[str]] = []

    async def run(self, argv: list[str], *, timeout: float | None = None, read_only: bool = False) -> Result:
        self.runs += 1
        if isinstance(self.newest, HostError):
            raise self.newest
        return self.newest

    @asynccontextmanager
    async def stream(self, argv: list[str]) -> AsyncIterator[ScriptedLines]:
        self.argvs.append(list(argv))
        if not self.streams:
            await asyncio.Event().wait()
        yield ScriptedLines(*self.streams.pop(0))


async def follow(host: _Host, count: int) -> tuple[JournalTail, list[LogEntry], list[float | None]]:
    """Run a tail until it has delivered ``count`` entries (and opened every stream given); what it delivered,
    and its ``since`` as each entry came."""
    got: list[LogEntry] = []
    since_then: list[float | None] = []
    tail = JournalTail(host, Commands(), ["a.service"], lambda e: (got.append(e), since_then.append(tail.since)))  # type: ignore[arg-type]
    task = asyncio.create_task(tail.run())
    try:
        async with asyncio.timeout(10):
            while len(got) < count or host.streams:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return tail, got, since_then


def newest(cursor: str, stamp: int) -> Result:
    return Result(("journalctl",), 0, line(cursor, stamp).decode() + "\n", "")


async def test_a_tail_whose_first_stream_broke_before_any_line_opens_again_after_the_same_newest_entry():
    host = _Host(newest("c9", 9_000_000), [([], 1, "journalctl: some hiccup"), ([[line("c10", 10_000_000)]], 0, "")])
    tail, got, since_then = await follow(host, 1)
    assert host.runs == 1, "the newest entry was read once: a second read would have skipped what came between"
    assert [a for argv in host.argvs for a in argv if a.startswith("--cursor")] == ["--cursor=c9", "--cursor=c9"]
    assert [e.cursor for e in got] == ["c10"] and since_then == [9.0]


async def test_a_tail_that_cannot_read_the_newest_entry_starts_seconds_back_and_knows_its_place_from_its_first_line():
    host = _Host(HostError("gpu0: journalctl did not finish within 30s"), [([[line("c1", 1_500_000)]], 0, "")])
    tail, got, since_then = await follow(host, 1)
    assert f"--since=-{RECENT:g}s" in host.argvs[0]
    assert since_then == [1.5] and tail.since == 1.5


async def test_a_tail_whose_journalctl_fails_to_show_the_newest_entry_starts_seconds_back_too():
    host = _Host(Result(("journalctl",), 1, "", "Unknown output format 'x'."), [([[line("c1", 2_000_000)]], 0, "")])
    await follow(host, 1)
    assert f"--since=-{RECENT:g}s" in host.argvs[0]


async def test_a_tail_on_an_empty_journal_starts_at_its_head_and_has_every_entry_from_the_start():
    host = _Host(Result(("journalctl",), 0, "", ""), [([[line("c1", 3_000_000)]], 0, "")])
    tail, got, since_then = await follow(host, 1)
    assert not any(a.startswith(("--cursor", "--since", "--lines")) for a in host.argvs[0])
    assert since_then == [0.0]


async def test_a_tail_whose_place_journalctl_refuses_looks_for_the_newest_entry_again():
    host = _Host(newest("c9", 9_000_000), [([], 1, "Failed to seek to cursor: Invalid argument"),
                                           ([[line("c10", 10_000_000)]], 0, "")])
    tail, got, since_then = await follow(host, 1)
    assert host.runs == 2 and [e.cursor for e in got] == ["c10"]
