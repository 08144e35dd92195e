"""SGLang's start-up phases, recognized from its own lines, for every generation pdtui knows.

Pure data and one small tracker, one home: the engine reads it (service_run.py
emits a PhaseStarted as each phase begins), the faces show the names. A phase
lasts from its own first line to the first line of the next phase, so a phase
needs only a start pattern; a phase a release does not print (the 2026 releases
have no torch-distributed line) is simply absent.

Phases only move forward, in table order: a later rank's "Load weight begin"
after the KV cache was allocated, or the second of the per-graph CUDA graph
lines, starts nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Phase:
    """A start-up phase: its name, the lines that begin it, and the short label a phase bar shows."""

    name: str
    start: re.Pattern[str]
    label: str
    generations: str = "all"


def _phase(name: str, pattern: str, label: str, generations: str = "all") -> Phase:
    return Phase(name, re.compile(pattern, re.IGNORECASE), label, generations)


PHASES: tuple[Phase, ...] = (
    # "Init torch distributed begin." (sim, older releases), or its "ends." line when that is the first seen.
    _phase("distributed", r"Init torch distributed (?:begin|ends)", "dist", "older 2025"),
    _phase("weights", r"Load weight begin", "weights"),
    # The memory pool is allocated between the weights' end and "Memory pool end".
    _phase("kv_cache", r"Load weight end|KV Cache is allocated|Memory pool end", "kv"),
    # Old: "Capture cuda graph begin."; 2026: "Capture decode CUDA graph begin." (and "... prefill CUDA graph").
    _phase("cuda_graphs", r"Capture (?:\w+ )?cuda graph begin", "graphs"),
    _phase("http", r"Started server process|Uvicorn running on", "http"),
    _phase("warmup", r"Start of (?:prefill|pd disaggregation|co-locate) warmup", "warm-up"),
    _phase("ready", r"The server is fired up and ready to roll", "ready"),
)

NAMES: tuple[str, ...] = tuple(p.name for p in PHASES)
LABELS: dict[str, str] = {p.name: p.label for p in PHASES}
_INDEX = {name: i for i, name in enumerate(NAMES)}
# Every start pattern at once: one search per line until the service is ready.
_ANY = re.compile("|".join(f"(?P<{p.name}>{p.start.pattern})" for p in PHASES), re.IGNORECASE)


def phase_of(message: str) -> str | None:
    """The phase a line begins, whatever came before it (None for every other line)."""
    found = _ANY.search(message)
    return found.lastgroup if found else None


class PhaseTracker:
    """One invocation's phases so far: tells which line starts a new one (only ever a later one)."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: str | None = None

    @property
    def over(self) -> bool:
        """The ready line has come: no line starts a phase any more (and none needs looking at)."""
        return self.current == "ready"

    def feed(self, message: str) -> str | None:
        """The phase ``message`` begins, when it is later than the current one; None otherwise."""
        if self.over:
            return None
        phase = phase_of(message)
        if phase is None or (self.current is not None and _INDEX[phase] <= _INDEX[self.current]):
            return None
        self.current = phase
        return phase


def durations(starts: list[tuple[str, float]]) -> dict[str, float]:
    """Each phase's duration from (phase, start time) pairs in order: until the next phase's start.

    The last phase (the ready line, or the one a failure cut short) has none.
    """
    pairs = zip(starts, starts[1:], strict=False)
    return {name: round(max(0.0, after - at), 3) for (name, at), (_, after) in pairs}
