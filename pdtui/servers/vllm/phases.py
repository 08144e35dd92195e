"""vLLM's start-up phases, recognized from its own lines.

Pure data, as SGLang's (pdtui/servers/sglang/phases.py), in a table of pdtui/servers/phase_table.py: the engine
emits a PhaseStarted as each phase begins, the faces show the labels. A phase lasts from its own first line to the
first line of the next, so a phase needs only a start pattern. The lines come from three processes (the API
server, the engine core, its workers: ``(EngineCore pid=N) INFO ...``), which a pattern ignores.

vLLM prints no line as its profile run, KV cache and warm-up begin, only when they are all over (``init engine
(profile, create kv cache, warmup model) took 20.49 s``): one phase covers them, from the weights' end to the
HTTP server's start. It also covers what the engine core does after that line (its scheduler, the NIXL side
channel), where a side-channel port taken by another server hangs it.

Phases only move forward, in table order: a second worker's ``Starting to load model`` after the first one's
weights are loaded starts nothing. How long each took is every engine's alike (pdtui/servers/phase_timing.py).
"""

from __future__ import annotations

from pdtui.servers.phase_table import Phase, PhaseTable, phase
from pdtui.servers.phase_timing import (  # noqa: F401  (re-exported: callers reach them as this module's)
    durations,
    slow,
    slow_from,
)

PHASES: tuple[Phase, ...] = (
    # The engine core process starts (v1/engine/core.py), before it spawns its workers.
    phase("engine", r"Initializing a V1 LLM engine", "engine", ("Initializing a V1 LLM engine",)),
    # Each worker joins torch.distributed (gloo on CPU, NCCL on GPUs): parallel_state.py.
    phase("distributed", r"world_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=", "dist",
          ("distributed_init_method=",)),
    phase("weights", r"Starting to load model", "weights", ("Starting to load model",)),
    # The weights' end (the default loader's line, the GPU model runner's): the profile run (torch.compile), the KV
    # cache and the warm-up (CUDA graphs) follow, with no line of their own until all are over.
    phase("kv_cache", r"Loading weights took|Model loading took", "kv+warm-up", ("Loading weights took", "Model loading took")),
    # 0.32: "Starting vLLM server on http://..."; older releases: "Starting vLLM API server on ...".
    phase("http", r"Starting vLLM (?:API )?server(?: \d+)? on", "http", ("Starting vLLM ",)),
    phase("ready", r"Application startup complete", "ready", ("Application startup complete",)),
)

# The phases a server is known to hang in, as a warning says: the rendezvous of several workers, and the engine's
# last steps, where a NIXL side-channel port (VLLM_NIXL_SIDE_CHANNEL_PORT) taken by another server hangs it.
HANG_PRONE: dict[str, str] = {"distributed": "distributed init",
                              "kv_cache": "the engine's profile run, KV cache, warm-up or NIXL side channel"}
# pdtui does not run vLLM over several nodes: it has no follower to wait for.
TABLE = PhaseTable(PHASES, HANG_PRONE)

NAMES, LABELS = TABLE.names, TABLE.labels
phase_of = TABLE.phase_of
follower_ready = TABLE.follower_ready
PhaseTracker = TABLE.tracker
"""One invocation's phases, as vLLM's lines begin them."""
