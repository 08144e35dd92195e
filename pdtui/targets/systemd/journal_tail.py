"""One journal tail per host, for all the units pdtui watches there.

``journalctl -f -o json -u A -u B ...`` runs in one channel (sshd allows only
ten per connection); each entry names its unit, so the tail is split by unit
downstream. When the stream breaks (a dropped SSH connection, journalctl
killed), the tail is opened again from the last cursor it delivered: no line
is lost and none is delivered twice, also when the journal was vacuumed or
rotated meanwhile (journalctl then resumes at the nearest entry still there).

Where the first stream starts is chosen once (:class:`Start`) and kept until
the tail delivers: a stream that breaks before then opens again at the same
place. From then on the tail tells (:attr:`JournalTail.since`) the moment,
by the host's journal, after which every entry of its units reaches it: what
an invocation logged before that is all a start needs to read of its history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pdtui.engine.log_entry import YIELD_EVERY, LogEntry
from pdtui.hosts.base import Host, HostError, HostNotFound, HostUnreachable
from pdtui.support.backoff import Backoff
from pdtui.targets.systemd.commands import Commands
from pdtui.targets.systemd.journal_json import parse_entry

LAST_ENTRY_TIMEOUT = 30.0
RECENT = 10.0
"""Seconds back a first tail starts when the journal's newest entry cannot be read (see JournalTail._start)."""


@dataclass(frozen=True, slots=True)
class Start:
    """Where a stream begins: after a cursor, ``recent`` seconds back by the host's clock, or at the journal's head.

    ``since``: the realtime (seconds since the epoch, the host's) from which
    on such a stream surely has every entry; None while that is not known.
    """

    cursor: str | None = None
    recent: float | None = None
    since: float | None = None


class JournalTail:
    """Follows several units' journals on one host and hands every entry to ``on_entry``."""

    def __init__(self, host: Host, commands: Commands, units: Sequence[str],
                 on_entry: Callable[[LogEntry], None],
                 on_problem: Callable[[str], None] = lambda message: None) -> None:
        self.host = host
        self.commands = commands
        self.units = list(units)
        self.on_entry = on_entry
        self._on_problem = on_problem
        self._told: str | None = None      # the problem last told, until a stream delivers again
        self.cursor: str | None = None     # the last entry delivered: where a stream opened again resumes
        self.since: float | None = None    # every entry from this realtime on (the host's) reaches on_entry
        self._origin: Start | None = None  # where the first stream starts, until one delivers
        self._seen: str | None = None      # the entry a stream starts from, delivered already
        self.delivered = 0
        self.started = asyncio.Event()     # set once the first stream is open

    async def run(self) -> None:
        """Follow until cancelled, reopening the stream after every break.

        A host that cannot be reached tells so itself (its status), once; one whose
        name does not resolve has no journal to follow.
        """
        backoff = Backoff()
        while True:
            try:
                got_lines = await self._follow_once()
            except HostNotFound:
                return
            except HostUnreachable:
                got_lines = False
            except HostError as exc:
                self.on_problem(str(exc))
                got_lines = False
            if got_lines:
                backoff.reset()
                self._told = None
            await asyncio.sleep(backoff.next())

    def on_problem(self, message: str) -> None:
        """Tell a problem once: a tail retrying every few seconds must not repeat it each time."""
        if message != self._told:
            self._told = message
            self._on_problem(message)

    async def _follow_once(self) -> bool:
        """One journalctl run; True if it delivered anything."""
        place = Start(self.cursor) if self.cursor else await self._start()
        self._seen = place.cursor
        argv = self.commands.follow(self.units, place.cursor, recent=place.recent)
        before = self.delivered
        async with self.host.stream(argv) as lines:
            self.started.set()
            async for batch in lines.batches():
                for start in range(0, len(batch), YIELD_EVERY):
                    if start:
                        await asyncio.sleep(0)   # a large burst would otherwise hold the loop
                    self._deliver(batch[start:start + YIELD_EVERY])
        status = getattr(lines, "exit_status", None)
        if status:
            detail = getattr(lines, "stderr", "") or f"exit status {status}"
            self.on_problem(f"{self.host.name}: journalctl stopped: {detail.splitlines()[-1]}")
            if place.cursor and "cursor" in detail.lower():
                self._lost_cursor()
        return self.delivered > before

    async def _start(self) -> Start:
        """Where a tail that has delivered nothing yet starts: chosen once, so a stream that broke early
        opens again at the same place and :attr:`since` holds; a place that could not be read is looked
        for again next time."""
        if self._origin is not None:
            return self._origin
        start = await self._journal_end()
        if start.since is not None:
            self._origin, self.since = start, start.since
        return start

    async def _journal_end(self) -> Start:
        """Where a first stream starts, from the journal's newest entry.

        Just after that entry (``--cursor``): measured on journald 252, this
        loses none of a unit's first lines, where ``--lines=0`` delivered only
        the last entry of its first batch. The stream then has every entry
        stamped from that entry's realtime on.

        No entry at all (an empty journal: journald never leaves one so, it
        writes into every new file, but a stand-in's can be): from its head,
        where everything is new.

        The newest entry cannot be read (journalctl fails, or prints none with
        a cursor): the last ``RECENT`` seconds by the host's own clock, which
        cover whatever is logged while the stream opens. They may replay a few
        lines of the units' earlier runs: shown, never judged (the engine judges
        only the invocation it started). :attr:`since` is then the first entry's.
        """
        try:
            result = await self.host.run(self.commands.last_entry(), timeout=LAST_ENTRY_TIMEOUT, read_only=True)
        except HostError:
            return Start(recent=RECENT)
        if result.ok and not result.stdout.strip():
            return Start(since=0.0)
        entries = [parse_entry(line) for line in result.stdout.splitlines()] if result.ok else []
        newest = next((e for e in reversed(entries) if e is not None and e.cursor), None)
        if newest is None:
            return Start(recent=RECENT)
        return Start(newest.cursor, since=newest.realtime)

    def _deliver(self, raw_lines: list[bytes]) -> None:
        on_entry = self.on_entry
        for raw in raw_lines:
            entry = parse_entry(raw)
            if entry is None:
                continue
            if self._seen is not None:
                seen, self._seen = self._seen, None
                if entry.cursor == seen:
                    continue
            if entry.cursor:
                self.cursor = entry.cursor
            if self.since is None:
                self.since = entry.realtime   # a stream from RECENT seconds back: none of its entries came earlier
            self.delivered += 1
            on_entry(entry)

    def _lost_cursor(self) -> None:
        """The entry of our cursor is gone (the journal was vacuumed or rotated): follow from now on, and tell
        from when on the tail has every entry again once it knows."""
        self.cursor, self._origin, self.since = None, None, None
        self.on_problem(f"{self.host.name}: the journal lost our place (vacuumed or rotated?); following new "
                        f"lines from now, lines written meanwhile may be missing")
