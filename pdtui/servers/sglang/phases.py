"""SGLang's start-up phases, recognized from its own lines, for every generation pdtui knows.

Pure data, one home: the engine reads it (service_run.py emits a PhaseStarted as
each phase begins), the faces show the names; how a line is matched and the
tracker are every engine's (pdtui/servers/phase_table.py). A phase lasts from its
own first line to the first line of the next phase, so a phase needs only a start
pattern; a phase a release does not print (the 2026 releases have no
torch-distributed line) is simply absent.

Phases only move forward, in table order: a later rank's "Load weight begin"
after the KV cache was allocated, or the second of the per-graph CUDA graph
lines, starts nothing.

How long a phase took and when it is slow are every engine's alike (pdtui/servers/phase_timing.py): this module
re-exports them.
"""

from __future__ import annotations

from pdtui.config.defaults import SGLANG_FOLLOWER_READY_LINE
from pdtui.servers.phase_table import FollowerLine, Phase, PhaseTable, phase
from pdtui.servers.phase_timing import (  # noqa: F401  (re-exported: callers reach them as this module's)
    SLOW,
    SLOW_FLOOR,
    STILL_RUNNING_FLOOR,
    durations,
    slow,
    slow_from,
)

PHASES: tuple[Phase, ...] = (
    # "Init torch distributed begin." (2025 and older), "Init parallel begin." (0.5.23), or its "ends." line when
    # that is the first seen.
    phase("distributed", r"Init (?:torch distributed|parallel) (?:begin|ends)", "dist",
          ("Init torch distributed", "Init parallel ")),
    phase("weights", r"Load weight begin", "weights", ("Load weight begin",)),
    # The memory pool is allocated between the weights' end and "Memory pool end".
    phase("kv_cache", r"Load weight end|KV Cache is allocated|Memory pool end", "kv",
          ("Load weight end", "KV Cache is allocated", "Memory pool end")),
    # Old: "Capture cuda graph begin."; 2026: "Capture decode CUDA graph begin." (and "... prefill CUDA graph").
    phase("cuda_graphs", r"Capture (?:\w+ )?(?:cuda|CUDA) graph begin", "graphs", (" graph begin",)),
    phase("http", r"Started server process|Uvicorn running on", "http", ("Started server process", "Uvicorn running on")),
    phase("warmup", r"Start of (?:prefill|pd disaggregation|co-locate) warmup", "warm-up", ("Start of ",)),
    # A rank >= 1 of a server over several nodes: ready once its dummy health server runs (0.5.23, then older).
    phase("ready", rf"The server is fired up and ready to roll|{SGLANG_FOLLOWER_READY_LINE}", "ready",
          ("fired up and ready to roll", "ummy health check server")),
)

# The phases a server is known to hang in (NCCL/c10d rendezvous, graph capture, the PD warm-up), as a warning says.
HANG_PRONE: dict[str, str] = {"distributed": "distributed init", "cuda_graphs": "CUDA graph capture",
                              "warmup": "the PD warm-up"}
# A rank >= 1 is ready once its dummy health server started.
TABLE = PhaseTable(PHASES, HANG_PRONE, FollowerLine(SGLANG_FOLLOWER_READY_LINE, "ummy health check server"))

NAMES, LABELS = TABLE.names, TABLE.labels
phase_of = TABLE.phase_of
follower_ready = TABLE.follower_ready
PhaseTracker = TABLE.tracker
"""One invocation's phases, as SGLang's lines begin them."""
