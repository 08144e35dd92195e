"""pdtui's journal tail on a real systemd 252 and journald, over real SSH: no line lost at the start, none twice.

Each test boots its own container (tests/systemd_host.py) and follows a unit
that has never logged: every entry journald kept of its first run must reach
the tail exactly once, systemd's ``Started`` line included, whichever way the
tail chose where to start. ``--lines=0``, the old start for a journal whose
newest entry could not be read, delivered 1 of 202 such entries here.

On a real journald the journal is never empty: journald writes a line of its own
into every new file (``journalctl --rotate --vacuum-files=1`` leaves that one),
and sshd logs each login. So the start for an empty journal is reached by a
``last_entry`` that matches nothing, and the start for an unreadable one by a
``last_entry`` the real journalctl refuses.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from pdtui.engine.log_entry import LogEntry
from pdtui.hosts.base import Result
from pdtui.hosts.ssh import SshHost
from pdtui.sim.systemd_host import SystemdHost
from pdtui.targets.systemd.commands import Commands
from pdtui.targets.systemd.journal_tail import RECENT, JournalTail
from pdtui.targets.systemd.shared_commands import InvocationHistory

LINES = 300
WAIT = 60.0      # seconds: generous, a loaded machine is slow; never a measured bound
# Rate limits off: journald drops lines of a fast burst on purpose, and this is about pdtui's losses.
UNIT = """[Service]
LogRateLimitIntervalSec=0
ExecStart=/bin/sh -c '{lines}; sleep 1'
"""
"""It sleeps a second after its lines: a process gone by the time journald reads its lines leaves them without
``_SYSTEMD_INVOCATION_ID`` (seen here: a unit that exited at once had none on 200 of its 202 entries)."""
AT_ONCE = f'for i in $(seq 1 {LINES}); do echo "line $i"; done'
# Ten lines a write, a tenth of a second apart: journald stamps each ten it reads at once with one microsecond.
# (%% is systemd's: %d alone would be its credentials folder.)
IN_TENS = f'for t in $(seq 0 {LINES // 10 - 1}); do printf "line %%d\\n" $(seq $((t*10+1)) $((t*10+10))); sleep 0.1; done'


class NewestMatchesNothing(Commands):
    """What pdtui sees of an empty journal: the newest entry is asked for and none comes (exit 0)."""

    def last_entry(self) -> list[str]:
        return self.journalctl("--output=json", "--no-pager", "--quiet", "--lines=1", "_SYSTEMD_UNIT=none.service")


@dataclass(frozen=True)
class NewestIs(Commands):
    """A journal whose newest entry, as pdtui reads it, is the one with this message."""

    message: str = ""

    def last_entry(self) -> list[str]:
        return self.journalctl("--output=json", "--no-pager", "--quiet", "--lines=1", f"MESSAGE={self.message}")


class NewestUnreadable(Commands):
    """A journalctl that fails when asked for the newest entry (the real one, refusing an output format)."""

    def last_entry(self) -> list[str]:
        return self.journalctl("--no-pager", "--quiet", "--lines=1", "--output=no-such-format")


def install(host: SystemdHost, unit: str, lines: str = AT_ONCE) -> None:
    text = UNIT.format(lines=lines)
    written = host.run("sh", "-c", f"printf %s {shlex.quote(text)} > /etc/systemd/system/{unit}")
    assert written.returncode == 0, written.stderr
    assert host.run("systemctl", "daemon-reload").returncode == 0


def kept(host: SystemdHost, unit: str) -> list[dict]:
    """Every entry the container's journal kept of ``unit``, read there with its own journalctl."""
    out = host.run("journalctl", "--output=json", "--all", "--no-pager", "--quiet", f"--unit={unit}").stdout
    return [json.loads(line) for line in out.splitlines()]


class Followed:
    """A JournalTail over SSH to the container, and what it delivered."""

    def __init__(self, host: SshHost, commands: Commands, unit: str) -> None:
        self.entries: list[LogEntry] = []
        self.problems: list[str] = []
        self.argvs: list[list[str]] = []
        self.ended = asyncio.Event()
        self.unit = unit
        stream = host.stream

        def recorded(argv: list[str]):
            self.argvs.append(argv)
            return stream(argv)

        host.stream = recorded     # type: ignore[method-assign]

        self.tail = JournalTail(host, commands, [unit], self._on_entry, self.problems.append)
        self.task = asyncio.create_task(self.tail.run())

    def _on_entry(self, entry: LogEntry) -> None:
        self.entries.append(entry)
        if entry.system and entry.message == f"{self.unit}: Deactivated successfully.":
            self.ended.set()

    async def until(self, ready: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT):
            while not ready():
                await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def first_run(systemd_host: SystemdHost, host: SshHost, commands: Commands) -> tuple[Followed, list[dict]]:
    """Follow a unit that never logged, start it once the tail's stream is open, until its run has ended."""
    unit = "t-numbered.service"
    install(systemd_host, unit)
    assert kept(systemd_host, unit) == []
    followed = Followed(host, commands, unit)
    try:
        async with asyncio.timeout(WAIT):
            await followed.tail.started.wait()
        started = await asyncio.to_thread(systemd_host.run, "systemctl", "start", unit)
        assert started.returncode == 0, started.stderr
        async with asyncio.timeout(WAIT):
            await followed.ended.wait()    # journalctl shows entries in order: all before it have come
    finally:
        await followed.stop()
    return followed, kept(systemd_host, unit)


def assert_every_entry_once(followed: Followed, journal: list[dict]) -> None:
    messages = [e["MESSAGE"] for e in journal]
    assert f"Started {followed.unit}." in messages
    assert [f"line {i}" for i in range(1, LINES + 1)] == [m for m in messages if m.startswith("line ")]
    print(f"\n{followed.unit}: the journal kept {len(journal)} entries, the tail delivered "
          f"{len(followed.entries)} ({len({e.cursor for e in followed.entries})} distinct)")
    assert [e.cursor for e in followed.entries] == [e["__CURSOR"] for e in journal]
    assert followed.problems == []


@pytest.mark.parametrize("rotated", [False, True], ids=["booted-journal", "rotated-and-vacuumed"])
async def test_a_tail_from_the_newest_entry_gets_every_entry_of_a_units_first_run_once(
        systemd_host, make_host, rotated):
    if rotated:
        fresh = systemd_host.run("journalctl", "--rotate", "--vacuum-files=1")
        assert fresh.returncode == 0, fresh.stderr
    host = make_host(systemd_host.port, config={"user": "root"})
    followed, journal = await first_run(systemd_host, host, Commands())
    assert any(a.startswith("--cursor=") for a in followed.argvs[0])
    assert_every_entry_once(followed, journal)


async def test_a_tail_on_a_journal_that_showed_no_entry_starts_at_its_head_and_gets_every_entry_once(
        systemd_host, make_host):
    host = make_host(systemd_host.port, config={"user": "root"})
    followed, journal = await first_run(systemd_host, host, NewestMatchesNothing())
    assert not any(a.startswith(("--cursor", "--since", "--lines")) for a in followed.argvs[0])
    assert_every_entry_once(followed, journal)


async def test_a_tail_whose_newest_entry_cannot_be_read_starts_some_seconds_back_and_gets_every_entry_once(
        systemd_host, make_host):
    host = make_host(systemd_host.port, config={"user": "root"})
    followed, journal = await first_run(systemd_host, host, NewestUnreadable())
    assert f"--since=-{RECENT:g}s" in followed.argvs[0]
    # Those seconds may hold other lines (sshd's are not followed): of the unit, only its run came.
    assert_every_entry_once(followed, journal)
    assert followed.tail.since == followed.entries[0].realtime


async def test_history_read_up_to_where_a_late_tail_starts_and_that_tail_hold_each_line_once(
        systemd_host, make_host):
    """A unit logs before its host's tail knows where it starts: the read stops there and the tail has the rest.

    The tail's place is line 25, inside a ten journald stamped with one microsecond: lines 26-30 have the stamp
    the read stops at, so both have them, and only the drop by cursor keeps each once.
    """
    unit = "t-tens.service"
    install(systemd_host, unit, IN_TENS)
    started = await asyncio.to_thread(systemd_host.run, "systemctl", "start", unit)
    assert started.returncode == 0, started.stderr
    invocation = systemd_host.run("systemctl", "show", "-p", "InvocationID", "--value", unit).stdout.strip()
    host = make_host(systemd_host.port, config={"user": "root"})
    followed = None
    try:
        async with asyncio.timeout(WAIT):
            while sum(e["MESSAGE"].startswith("line ") for e in kept(systemd_host, unit)) < 30:
                await asyncio.sleep(0.05)
        followed = Followed(host, NewestIs(message="line 25"), unit)
        await followed.until(lambda: followed.tail.since is not None)

        async def run(argv: list[str], deadline: float | None) -> Result:
            return await host.run(argv, timeout=WAIT)

        result, history = await InvocationHistory(run, Commands(), until=lambda: followed.tail.since).lines(invocation)
        assert result.ok, result.stderr
        async with asyncio.timeout(WAIT):
            await followed.ended.wait()
    finally:
        if followed is not None:
            await followed.stop()
    own = [e for e in kept(systemd_host, unit) if e.get("_SYSTEMD_INVOCATION_ID") == invocation]
    read = [e.cursor for e in history if not e.system]
    assert any(e.system and "Started" in e.message for e in history), "systemd's lines about the run are read too"
    tailed = [e.cursor for e in followed.entries if not e.system and e.invocation == invocation]
    shared = set(read) & set(tailed)
    print(f"\n{unit}: {len(own)} lines; the read had {len(read)}, the tail {len(tailed)}, {len(shared)} of them both")
    # As ServiceRun.consume does: what the read had, the tail's copy of it is dropped.
    assert read + [c for c in tailed if c not in set(read)] == [e["__CURSOR"] for e in own]
    assert [e.message for e in history if not e.system][:25] == [f"line {i}" for i in range(1, 26)]
    assert len(read) < len(own) - 100, "the read stopped where the tail begins"
    place = next(e for e in own if e["MESSAGE"] == "line 25")["__REALTIME_TIMESTAMP"]
    assert len(shared) == sum(e["__REALTIME_TIMESTAMP"] == place for e in own[25:])
