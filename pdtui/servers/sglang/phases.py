"""SGLang's start-up phases, recognized from its own lines, for every generation pdtui knows.

Pure data and one small tracker, one home: the engine reads it (service_run.py
emits a PhaseStarted as each phase begins), the faces show the names. A phase
lasts from its own first line to the first line of the next phase, so a phase
needs only a start pattern; a phase a release does not print (the 2026 releases
have no torch-distributed line) is simply absent.

Phases only move forward, in table order: a later rank's "Load weight begin"
after the KV cache was allocated, or the second of the per-graph CUDA graph
lines, starts nothing.

How long a phase took and when it is slow are every engine's alike (pdtui/servers/phase_timing.py): this module
re-exports them, as SGLang's engine reads them from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ahocorasick_rs import AhoCorasick

from pdtui.config.defaults import SGLANG_FOLLOWER_READY_LINE
from pdtui.servers import phase_timing
from pdtui.servers.phase_timing import (  # noqa: F401  (re-exported: callers reach them as this module's)
    SLOW,
    SLOW_FLOOR,
    STILL_RUNNING_FLOOR,
    durations,
    slow,
    slow_from,
)


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


def _phase(name: str, pattern: str, label: str, hints: tuple[str, ...], generations: str = "all") -> Phase:
    return Phase(name, re.compile(pattern), label, hints, generations)


PHASES: tuple[Phase, ...] = (
    # "Init torch distributed begin." (2025 and older), "Init parallel begin." (0.5.23), or its "ends." line when
    # that is the first seen.
    _phase("distributed", r"Init (?:torch distributed|parallel) (?:begin|ends)", "dist",
           ("Init torch distributed", "Init parallel ")),
    _phase("weights", r"Load weight begin", "weights", ("Load weight begin",)),
    # The memory pool is allocated between the weights' end and "Memory pool end".
    _phase("kv_cache", r"Load weight end|KV Cache is allocated|Memory pool end", "kv",
           ("Load weight end", "KV Cache is allocated", "Memory pool end")),
    # Old: "Capture cuda graph begin."; 2026: "Capture decode CUDA graph begin." (and "... prefill CUDA graph").
    _phase("cuda_graphs", r"Capture (?:\w+ )?(?:cuda|CUDA) graph begin", "graphs", (" graph begin",)),
    _phase("http", r"Started server process|Uvicorn running on", "http", ("Started server process", "Uvicorn running on")),
    _phase("warmup", r"Start of (?:prefill|pd disaggregation|co-locate) warmup", "warm-up", ("Start of ",)),
    # A rank >= 1 of a server over several nodes: ready once its dummy health server runs (0.5.23, then older).
    _phase("ready", rf"The server is fired up and ready to roll|{SGLANG_FOLLOWER_READY_LINE}", "ready",
           ("fired up and ready to roll", "ummy health check server")),
)

NAMES: tuple[str, ...] = tuple(p.name for p in PHASES)
LABELS: dict[str, str] = {p.name: p.label for p in PHASES}
# The phases a server is known to hang in (NCCL/c10d rendezvous, graph capture, the PD warm-up), as a warning says.
HANG_PRONE: dict[str, str] = {"distributed": "distributed init", "cuda_graphs": "CUDA graph capture",
                              "warmup": "the PD warm-up"}
_INDEX = {name: i for i, name in enumerate(NAMES)}
# Every start pattern at once, looked for only in a line that holds a hint: most lines hold none, and the
# alternation's search costs a short line 80 µs, the server's arguments (5 KB on one line) 2.7 ms; the hints, all
# looked for in one Aho-Corasick pass, 1.5 µs a start-up line on average (2.3 each looked for in turn).
_ANY = re.compile("|".join(f"(?P<{p.name}>{p.start.pattern})" for p in PHASES))
_HINTS: tuple[str, ...] = tuple(hint for p in PHASES for hint in p.hints)
_HINTED = AhoCorasick(list(_HINTS)).find_matches_as_indexes


_FOLLOWER_READY = re.compile(SGLANG_FOLLOWER_READY_LINE)


def follower_ready(message: str) -> bool:
    """Whether a rank >= 1's line says it is ready: its dummy health server started."""
    return "ummy health check server" in message and _FOLLOWER_READY.search(message) is not None


def phase_of(message: str) -> str | None:
    """The phase a line begins, whatever came before it (None for every other line)."""
    if not _HINTED(message):
        return None
    found = _ANY.search(message)
    return found.lastgroup if found else None


class PhaseTracker(phase_timing.PhaseTracker):
    """One invocation's phases, as SGLang's lines begin them."""

    __slots__ = ()
    phase_of = staticmethod(phase_of)
    order = _INDEX
