"""vLLM's start-up phases, recognized from its own lines.

Pure data and one small tracker, as SGLang's (pdtui/servers/sglang/phases.py): the engine emits a PhaseStarted as
each phase begins, the faces show the labels. A phase lasts from its own first line to the first line of the
next, so a phase needs only a start pattern. The lines come from three processes (the API server, the engine
core, its workers: ``(EngineCore pid=N) INFO ...``), which a pattern ignores.

vLLM prints no line as its profile run, KV cache and warm-up begin, only when they are all over (``init engine
(profile, create kv cache, warmup model) took 20.49 s``): one phase covers them, from the weights' end to the
HTTP server's start. It also covers what the engine core does after that line (its scheduler, the NIXL side
channel), where a side-channel port taken by another server hangs it.

Phases only move forward, in table order: a second worker's ``Starting to load model`` after the first one's
weights are loaded starts nothing. How long each took is every engine's alike (pdtui/servers/phase_timing.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ahocorasick_rs import AhoCorasick

from pdtui.servers import phase_timing
from pdtui.servers.phase_timing import (  # noqa: F401  (re-exported: its engine reads them as this module's)
    durations,
    slow,
    slow_from,
)


@dataclass(frozen=True, slots=True)
class Phase:
    """A start-up phase: its name, the lines that begin it, the short label a phase bar shows, and texts one of
    which every such line holds (looked for before the pattern: vLLM's engine config is one 5 KB line)."""

    name: str
    start: re.Pattern[str]
    label: str
    hints: tuple[str, ...]


def _phase(name: str, pattern: str, label: str, hints: tuple[str, ...]) -> Phase:
    return Phase(name, re.compile(pattern), label, hints)


PHASES: tuple[Phase, ...] = (
    # The engine core process starts (v1/engine/core.py), before it spawns its workers.
    _phase("engine", r"Initializing a V1 LLM engine", "engine", ("Initializing a V1 LLM engine",)),
    # Each worker joins torch.distributed (gloo on CPU, NCCL on GPUs): parallel_state.py.
    _phase("distributed", r"world_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=", "dist",
           ("distributed_init_method=",)),
    _phase("weights", r"Starting to load model", "weights", ("Starting to load model",)),
    # The weights' end (the default loader's line, the GPU model runner's): the profile run (torch.compile), the KV
    # cache and the warm-up (CUDA graphs) follow, with no line of their own until all are over.
    _phase("kv_cache", r"Loading weights took|Model loading took", "kv+warm-up", ("Loading weights took", "Model loading took")),
    # 0.32: "Starting vLLM server on http://..."; older releases: "Starting vLLM API server on ...".
    _phase("http", r"Starting vLLM (?:API )?server(?: \d+)? on", "http", ("Starting vLLM ",)),
    _phase("ready", r"Application startup complete", "ready", ("Application startup complete",)),
)

NAMES: tuple[str, ...] = tuple(p.name for p in PHASES)
LABELS: dict[str, str] = {p.name: p.label for p in PHASES}
# The phases a server is known to hang in, as a warning says: the rendezvous of several workers, and the engine's
# last steps, where a NIXL side-channel port (VLLM_NIXL_SIDE_CHANNEL_PORT) taken by another server hangs it.
HANG_PRONE: dict[str, str] = {"distributed": "distributed init",
                              "kv_cache": "the engine's profile run, KV cache, warm-up or NIXL side channel"}
_INDEX = {name: i for i, name in enumerate(NAMES)}
_ANY = re.compile("|".join(f"(?P<{p.name}>{p.start.pattern})" for p in PHASES))
_HINTED = AhoCorasick([hint for p in PHASES for hint in p.hints]).find_matches_as_indexes


def follower_ready(message: str) -> bool:
    """Whether a rank >= 1 of a server over several nodes says it is ready: never, as pdtui does not run vLLM over
    several nodes (there is no such rank to wait for)."""
    return False


def phase_of(message: str) -> str | None:
    """The phase a line begins, whatever came before it (None for every other line)."""
    if not _HINTED(message):
        return None
    found = _ANY.search(message)
    return found.lastgroup if found else None


class PhaseTracker(phase_timing.PhaseTracker):
    """One invocation's phases, as vLLM's lines begin them."""

    __slots__ = ()
    phase_of = staticmethod(phase_of)
    order = _INDEX
