"""A serving engine's start-up phases as a table: the lines that begin each, in order, and the tracker that walks them.

Each engine's package declares its rows (pdtui/servers/<engine>/phases.py); how a line is matched against them and
how an invocation only ever moves forward are every engine's alike, so they live here once. A phase lasts from its
own first line to the first line of the next, so a phase needs only a start pattern.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ahocorasick_rs import AhoCorasick


@dataclass(frozen=True, slots=True)
class Phase:
    """A start-up phase: its name, the lines that begin it, and the short label a phase bar shows.

    ``hints``: texts one of which every line that begins it holds, looked for before the pattern.
    """

    name: str
    start: re.Pattern[str]
    label: str
    hints: tuple[str, ...]
    generations: str = "all"


def phase(name: str, pattern: str, label: str, hints: tuple[str, ...], generations: str = "all") -> Phase:
    """A table's row, its pattern compiled."""
    return Phase(name, re.compile(pattern), label, hints, generations)


@dataclass(frozen=True, slots=True)
class FollowerLine:
    """The line a rank >= 1 of a server over several nodes prints once it is ready (it prints no ready line), and a
    text every such line holds, looked for before the pattern."""

    pattern: str
    hint: str


class PhaseTable:
    """An engine's phases in start-up order (``ready`` last, ``http`` among them), the ones its servers are known to
    hang in (in a warning's words), and its followers' ready line (None: it runs no server over several nodes).

    Every start pattern is looked for at once, only in a line that holds a hint: most lines hold none, and the
    alternation's search costs a short line 80 µs, a server's arguments (5 KB on one line) 2.7 ms; the hints, all
    looked for in one Aho-Corasick pass, 1.5 µs a start-up line on average (2.3 each looked for in turn).
    """

    __slots__ = ("_any", "_follower", "_hinted", "hang_prone", "labels", "names", "order", "phases")

    def __init__(self, phases: tuple[Phase, ...], hang_prone: Mapping[str, str],
                 follower: FollowerLine | None = None) -> None:
        self.phases = phases
        self.names: tuple[str, ...] = tuple(p.name for p in phases)
        self.labels: dict[str, str] = {p.name: p.label for p in phases}
        self.hang_prone: dict[str, str] = dict(hang_prone)
        self.order: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self._any = re.compile("|".join(f"(?P<{p.name}>{p.start.pattern})" for p in phases))
        self._hinted = AhoCorasick([hint for p in phases for hint in p.hints]).find_matches_as_indexes
        self._follower = (follower.hint, re.compile(follower.pattern)) if follower else None

    def phase_of(self, message: str) -> str | None:
        """The phase a line begins, whatever came before it (None for every other line)."""
        if not self._hinted(message):
            return None
        found = self._any.search(message)
        return found.lastgroup if found else None

    def follower_ready(self, message: str) -> bool:
        """Whether a rank >= 1's line says it is ready (never, for an engine with no followers)."""
        if self._follower is None:
            return False
        hint, pattern = self._follower
        return hint in message and pattern.search(message) is not None

    def tracker(self) -> PhaseTracker:
        """A fresh invocation's phases."""
        return PhaseTracker(self)


class PhaseTracker:
    """One invocation's phases so far: tells which line starts a new one (only ever a later one in its table)."""

    __slots__ = ("_table", "current")

    def __init__(self, table: PhaseTable) -> None:
        self._table = table
        self.current: str | None = None

    @property
    def over(self) -> bool:
        """The ready line has come: no line starts a phase any more (and none needs looking at)."""
        return self.current == "ready"

    @property
    def serving_http(self) -> bool:
        """Its HTTP server is starting (the ``http`` phase or a later one began): its arguments are fixed, and it
        answers within moments."""
        order = self._table.order
        return self.current is not None and order[self.current] >= order["http"]

    def feed(self, message: str) -> str | None:
        """The phase ``message`` begins, when it is later than the current one; None otherwise."""
        if self.over:
            return None
        phase = self._table.phase_of(message)
        order = self._table.order
        if phase is None or (self.current is not None and order[phase] <= order[self.current]):
            return None
        self.current = phase
        return phase
