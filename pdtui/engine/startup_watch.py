"""A server's start-up watched for silence and slowness, each told once where it happens, while it happens.

Two rules about a start that takes too long, for the servers whose lines tell
their phases (prefills and decodes):

- **a stall**: no line for ``stall_after`` (the config's, else a quarter of the
  timeout, at least a minute and at most half the timeout) in a phase its
  serving engine is known to hang in, or before its first phase line. Told
  once per place as a warning (a slow first line under load, then a hang in
  distributed init, are two stalls), and named again by the timeout's reason
  (``stuck in CUDA graph capture since 0:30, no line for 4m30s``).
- **a slow phase**: a phase that has run three times as long as in the last
  successful run (and a minute): a phase that logs all along is no stall, but
  may be slow.

One :class:`StartupWatch` per start (the run's Attempt holds it); the run feeds
it the times of its lines and phases, asks when to look next, and says what it
returns. Every method takes the start's moment: a target may move it back once
it learns when its unit really started.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pdtui.config.fields import format_duration, format_elapsed, took
from pdtui.engine.run_lines import PHASED_ROLES

if TYPE_CHECKING:
    from pdtui.config import ServiceConfig
    from pdtui.servers import PhaseTracking, ServingEngine

MIN_STALL = 60.0      # seconds: the shortest default silence called a stall


def stall_after(configured: float | None, timeout: float) -> float:
    """Silence this long in a phase known to hang is a stall: the config's, else a quarter of the timeout (at
    least a minute, so that a long timeout's quiet phases are not called stuck too soon) and at most half of it (so
    that a short timeout is warned about before it runs out)."""
    return configured if configured is not None else min(max(MIN_STALL, timeout / 4), timeout / 2)


@dataclass(frozen=True, slots=True)
class Stall:
    """A server silent in a phase known to hang: where, since when (from its start), and for how long; or, with
    ``stuck`` False, merely where a start that ran out of time stood."""

    words: str
    since: float
    silent: float
    stuck: bool = True

    def warning(self, timeout: float) -> str:
        return (f"no line for {format_duration(round(self.silent))} in {self.words} (since {format_elapsed(self.since)}): "
                f"it may be stuck; not ready after {format_duration(timeout)} it fails")

    def timeout_reason(self, timeout: float) -> str:
        return (f"not ready after {timeout:g}s: {'stuck ' if self.stuck else ''}in {self.words} since "
                f"{format_elapsed(self.since)}, no line for {format_duration(round(self.silent))}")


@dataclass(slots=True)
class StartupWatch:
    """One start's phases watched for a stall and a slow phase (see the module's docstring)."""

    serving: ServingEngine
    phases: PhaseTracking
    stall_after: float
    last: Mapping[str, float]                     # each phase's length in the last successful run
    watched: bool = True                          # False: a server whose lines tell no phases (a router)
    phase_at: float | None = None                 # when the current phase began (the run's clock)
    last_line_at: float | None = None             # when the latest line came
    stall_told: set[str] = field(default_factory=set)   # the places a stall was told in
    slow_told: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, cfg: ServiceConfig, serving: ServingEngine, last: Mapping[str, float]) -> StartupWatch:
        """A start of ``cfg``'s service: its phases read by its serving engine, a stall after its config's silence,
        its phases compared with ``last``; watched where its lines tell phases (a prefill's, a decode's)."""
        return cls(serving, serving.phase_tracker(), stall_after(cfg.stall_after, cfg.timeout), last,
                   watched=cfg.role in PHASED_ROLES)

    def line(self, now: float) -> None:
        self.last_line_at = now

    def phase_began(self, now: float) -> None:
        self.phase_at = now

    def stall(self, now: float, started: float | None) -> Stall | None:
        """The stall under way, else None: silence in a phase known to hang, or before the first phase line (lines
        but no phase yet: the rendezvous that comes before them)."""
        where, words = self.position(now, started), self._stall_place()
        if where is None or words is None or where.silent < self.stall_after:
            return None
        return replace(where, words=words, stuck=True)

    def _stall_place(self) -> str | None:
        """Where a silence now would be a stall: a phase known to hang, the rendezvous before the first phase line,
        or the start before any line; None in a phase that may be quiet."""
        phase = self.phases.current
        if phase is None:
            return "distributed init" if self.last_line_at is not None else "its start (no line yet)"
        return self.serving.hang_prone.get(phase)

    def position(self, now: float, started: float | None) -> Stall | None:
        """Where a start stands, a stall or not: its phase, since when, its silence (None for a server whose lines
        tell no phases, or one not started or over)."""
        if not self.watched or started is None or self.phases.over:
            return None
        phase = self.phases.current
        if phase is None:
            words = "its start (no phase line yet)" if self.last_line_at is not None else "its start (no line yet)"
        else:
            words = self.serving.hang_prone.get(phase) or f"its start-up ({self.serving.phase_labels[phase]})"
        silent = now - (self.last_line_at if self.last_line_at is not None else started)
        return Stall(words, (self.phase_at if self.phase_at is not None else started) - started, silent, stuck=False)

    def due(self, started: float | None) -> float:
        """When a stall or a slow phase can next be told (inf when neither can)."""
        return min(self._stall_due(started), self._slow_due())

    def warnings(self, now: float, started: float | None, timeout: float, evidence: str | None = None) -> list[str]:
        """What is to be told now: a stall once per place, a slow phase once per phase, in one start; each with
        ``evidence`` (the server's latest warning line), which often says why it waits (a KV pool too small for its
        warm-up, a peer it cannot reach) where the silence alone does not."""
        told = self._told(now, started, timeout)
        return [f"{warning}; its last warning: {evidence}" for warning in told] if evidence else told

    def _told(self, now: float, started: float | None, timeout: float) -> list[str]:
        told = []
        stall = self.stall(now, started)
        if stall is not None and stall.words not in self.stall_told:
            self.stall_told.add(stall.words)
            told.append(stall.warning(timeout))
        slow = self._slow_phase()
        if slow is not None and now >= slow[2]:
            phase, last, _ = slow
            seconds = now - (self.phase_at or now)
            self.slow_told.add(phase)
            label = self.serving.phase_labels.get(phase, phase)
            told.append(f"{label} running for {format_duration(round(seconds))}, {seconds / last:.1f}× the last "
                        f"successful run's {took(last)}: it may be stuck")
        return told

    def where(self, serving: bool) -> str:
        """Where a server that says it is stuck is: ``while serving``, ``in CUDA graph capture``..."""
        phase = self.phases.current
        if serving:
            return "while serving"
        if phase is None:
            return "early in its start-up"
        if phase in self.serving.hang_prone:
            return f"in {self.serving.hang_prone[phase]}"
        return f"in its start-up ({self.serving.phase_labels[phase]})"

    def _stall_due(self, started: float | None) -> float:
        place = self._stall_place()
        if started is None or not self.watched or place is None or place in self.stall_told:
            return math.inf
        return (self.last_line_at if self.last_line_at is not None else started) + self.stall_after

    def _slow_phase(self) -> tuple[str, float, float] | None:
        """The phase under way, its last length and when it becomes slow against it; None when that is not
        known or was told already."""
        phase, began = self.phases.current, self.phase_at
        if phase is None or phase == "ready" or began is None or phase in self.slow_told:
            return None
        last = self.last.get(phase)
        return (phase, last, began + self.serving.slow_from(last)) if last else None

    def _slow_due(self) -> float:
        known = self._slow_phase()
        return known[2] if known is not None else math.inf
