"""The engine's per-line work alone: journal JSON -> entry -> judged record, lines/s.

A fake host streams N real-format `journalctl -o json` lines (SGLang batch lines,
a few with escape codes) into a JournalTail; each entry is judged by a decode
service's LineJudge and made a LogRecord, as the orchestrator does. No process,
no SSH, no UI: this is the ceiling the engine puts on log throughput.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import emit, parse_args, summary  # noqa: E402
from pdtui.engine.events import LogRecord  # noqa: E402
from pdtui.engine.readiness import LineJudge  # noqa: E402
from pdtui.hosts.base import Result, line_batches  # noqa: E402
from pdtui.servers.sglang.signatures import signatures_for  # noqa: E402
from pdtui.targets.systemd.commands import Commands  # noqa: E402
from pdtui.targets.systemd.journal_tail import JournalTail  # noqa: E402

UNIT = "sglang-dsv4-decode.service"


def journal_lines(n: int) -> list[bytes]:
    lines = []
    for i in range(n):
        message = (f"[2026-11-30 18:16:{i % 60:02d} TP0] Decode batch. #running-req: 12, #token: {5632 + i}, "
                   f"token usage: 0.01, gen throughput (token/s): 812.44, #queue-req: 0")
        value = list((("\x1b[32m" + message + "\x1b[0m") if i % 50 == 0 else message).encode()) \
            if i % 50 == 0 else message
        lines.append(json.dumps({"__CURSOR": f"s=bench;i={i:x}", "__REALTIME_TIMESTAMP": str(1764526576000000 + i),
                                 "PRIORITY": "6", "_PID": "4242", "_SYSTEMD_UNIT": UNIT,
                                 "_SYSTEMD_INVOCATION_ID": "0123456789abcdef0123456789abcdef",
                                 "MESSAGE": value}).encode())
    return lines


class FakeHost:
    name = "bench"

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    async def run(self, argv, *, timeout=None, read_only=False) -> Result:
        """A command run to its end: here only the tail's look for the journal's end, which finds none."""
        return Result(tuple(argv), 0, "", "")

    @asynccontextmanager
    async def stream(self, argv):
        yield MemoryStream(b"".join(line + b"\n" for line in self.lines))


class MemoryStream:
    """A command's stdout already in memory, read in pieces as a pipe or channel hands it over."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.offset = 0

    async def read(self, size: int) -> bytes:
        chunk = bytes(self.data[self.offset:self.offset + size])
        self.offset += len(chunk)
        return chunk

    def batches(self):
        return line_batches(self.read)


async def one_run(lines: list[bytes]) -> float:
    judge = LineJudge("fired up and ready", signatures_for("decode"))
    records: list[LogRecord] = []
    done = asyncio.Event()

    def on_entry(entry) -> None:
        records.append(LogRecord(entry.message, judge.kind(entry.message, entry.priority), entry.realtime, entry.cursor))
        if len(records) == len(lines):
            done.set()

    tail = JournalTail(FakeHost(lines), Commands(), [UNIT], on_entry)
    started = time.perf_counter()
    task = asyncio.create_task(tail.run())
    await done.wait()
    elapsed = time.perf_counter() - started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return len(lines) / elapsed


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    n, runs = (5_000, 2) if args.quick else (200_000, 5)
    lines = journal_lines(n)
    rates = [asyncio.run(one_run(lines)) for _ in range(runs)]
    emit({"quick": args.quick, "lines": n, "runs": runs, "lines_per_s": summary(rates, digits=0)})


if __name__ == "__main__":
    main()
