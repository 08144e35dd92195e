"""One journal tail per host, for all the units pdtui watches there.

``journalctl -f -o json -u A -u B ...`` runs in one channel (sshd allows only
ten per connection); each entry names its unit, so the tail is split by unit
downstream. When the stream breaks (a dropped SSH connection, journalctl
killed), the tail is opened again from the last cursor it delivered: no line
is lost and none is delivered twice, also when the journal was vacuumed or
rotated meanwhile (journalctl then resumes at the nearest entry still there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from pdtui.hosts.base import Host, HostError, HostNotFound, HostUnreachable
from pdtui.support.backoff import Backoff
from pdtui.systemd import Commands, JournalEntry, parse_entry

BACKOFF_START = 0.2
BACKOFF_MAX = 5.0
# Lines handled between two yields to the event loop during a burst (about 2 ms of work).
YIELD_EVERY = 200
LAST_ENTRY_TIMEOUT = 30.0


class JournalTail:
    """Follows several units' journals on one host and hands every entry to ``on_entry``."""

    def __init__(self, host: Host, commands: Commands, units: Sequence[str],
                 on_entry: Callable[[JournalEntry], None],
                 on_problem: Callable[[str], None] = lambda message: None) -> None:
        self.host = host
        self.commands = commands
        self.units = list(units)
        self.on_entry = on_entry
        self._on_problem = on_problem
        self._told: str | None = None      # the problem last told, until a stream delivers again
        self.cursor: str | None = None
        self._seen: str | None = None      # the entry a stream starts from, delivered already
        self.delivered = 0
        self.started = asyncio.Event()     # set once the first stream is open

    async def run(self) -> None:
        """Follow until cancelled, reopening the stream after every break.

        A host that cannot be reached tells so itself (its status), once; one whose
        name does not resolve has no journal to follow.
        """
        backoff = Backoff(BACKOFF_START, BACKOFF_MAX)
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
        self._seen = self.cursor or await self._journal_end()
        argv = self.commands.follow(self.units, self._seen)
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
            if self.cursor and "cursor" in detail.lower():
                self._lost_cursor()
        return self.delivered > before

    async def _journal_end(self) -> str | None:
        """The cursor of the journal's newest entry, to follow the units from just after it.

        journalctl 252's ``-f --lines=0 -u A`` started before A has any entry
        shows only the last 10 lines of A's first burst; ``--after-cursor`` at
        the journal's end loses none. None (an empty journal, a journalctl that
        cannot say): ``--lines=0`` after all.
        """
        try:
            result = await self.host.run(self.commands.last_entry(), timeout=LAST_ENTRY_TIMEOUT)
        except HostError:
            return None
        entries = [parse_entry(line) for line in result.stdout.splitlines()] if result.ok else []
        return next((e.cursor for e in reversed(entries) if e is not None and e.cursor), None)

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
            self.delivered += 1
            on_entry(entry)

    def _lost_cursor(self) -> None:
        """The entry of our cursor is gone (the journal was vacuumed or rotated): follow from now on."""
        self.cursor = None
        self.on_problem(f"{self.host.name}: the journal lost our place (vacuumed or rotated?); following new "
                        f"lines from now, lines written meanwhile may be missing")
