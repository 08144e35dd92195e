"""Start-up phases read from SGLang's own lines: every generation's wording, in order, only forward."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdtui.config.fields import took
from pdtui.faces.timeline import phase_bar
from pdtui.servers.sglang.phases import NAMES, PHASES, PhaseTracker, durations, phase_of
from pdtui.sim.wording import WORDINGS

# SGLang's real start-up lines across releases (the line format and its wording drift; see signatures.py).
REAL_LINES = {
    "[2025-10-16 09:06:09 TP0] Init torch distributed ends. mem usage=1.96 GB": "distributed",
    "[2026-12-05 07:58:31] Init parallel begin.": "distributed",       # 0.5.23, as a real CPU server printed it
    "[2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB": "weights",
    "[2025-03-27 21:33:30 TP0] Load weight end. type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, "
    "avail mem=131.08 GB, mem usage=8.13 GB.": "kv_cache",
    "[2025-03-27 21:33:31 TP0] KV Cache is allocated. #tokens: 834615, K size: 54.12 GB, V size: 54.12 GB": "kv_cache",
    "[2025-03-27 21:33:31 TP0] Memory pool end. avail mem=14.61 GB": "kv_cache",
    "[2025-03-27 21:33:31 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=13.95 GB":
        "cuda_graphs",
    "[2026-05-02 10:00:00 TP0] Capture decode CUDA graph begin. backend=full, avail mem=13.95 GB": "cuda_graphs",
    "[2026-05-02 10:00:00 TP0] Capture prefill CUDA graph begin. backend=full, avail mem=13.95 GB": "cuda_graphs",
    "[2025-02-17 05:27:24] INFO:     Started server process [1]": "http",
    "[2025-02-17 05:27:24] INFO:     Uvicorn running on http://0.0.0.0:40000 (Press CTRL+C to quit)": "http",
    "[2025-02-17 05:27:25] Start of prefill warmup ...": "warmup",
    "[2025-02-17 05:27:25] Start of pd disaggregation warmup ...": "warmup",
    "[2025-02-17 05:27:25] Start of co-locate warmup ...": "warmup",
    "[2025-02-17 05:27:32] The server is fired up and ready to roll!": "ready",
}

NOT_PHASES = [
    "[2025-11-30 12:50:15] Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.",
    "[2026-05-02 10:00:05] Capture decode CUDA graph end. elapsed=12.34 s, mem usage=1.2 GB, avail mem=12.5 GB.",
    "[2025-02-17 05:27:24] INFO:     Waiting for application startup.",
    "[2025-02-17 05:27:25 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00",
    "[2025-02-17 05:27:32] End of prefill warmup with status 200, resp: [...]",
    "Exception: Capture cuda graph failed: CUDA out of memory.",
]


@pytest.mark.parametrize(("line", "phase"), REAL_LINES.items())
def test_each_real_start_up_line_names_its_phase(line, phase):
    assert phase_of(line) == phase


@pytest.mark.parametrize("line", NOT_PHASES)
def test_ends_steady_state_and_failures_begin_no_phase(line):
    assert phase_of(line) is None


@pytest.mark.parametrize("generation", WORDINGS)
def test_every_generations_graph_and_warm_up_wording_begins_its_phase(generation):
    words = WORDINGS[generation]
    assert phase_of(words.graph_begin) == "cuda_graphs"
    assert phase_of(words.warmup_start) == "warmup"
    assert all(phase_of(line) is None for line in (words.graph_end, *words.warmup_ok))


def test_phases_only_move_forward():
    tracker = PhaseTracker()
    told = [tracker.feed(line) for line in (
        "Load weight begin. avail mem=1 GB", "Load weight end. type=X", "KV Cache is allocated. #tokens: 1",
        "Load weight begin. avail mem=1 GB",          # another rank, late: nothing new
        "Capture decode CUDA graph begin.", "Capture prefill CUDA graph begin.",
        "The server is fired up and ready to roll!", "Uvicorn running on http://x",
    )]
    assert told == ["weights", "kv_cache", None, None, "cuda_graphs", None, "ready", None]
    assert tracker.over


def test_a_phase_lasts_until_the_next_one_begins_and_the_last_has_no_length():
    assert durations([("weights", 100.0), ("kv_cache", 141.0), ("cuda_graphs", 144.5), ("ready", 150.0)]) == {
        "weights": 41.0, "kv_cache": 3.5, "cuda_graphs": 5.5}


def test_the_table_runs_in_start_up_order():
    assert NAMES == ("distributed", "weights", "kv_cache", "cuda_graphs", "http", "warmup", "ready")


def test_the_phase_bar_shows_lengths_and_the_phase_under_way():
    starts: list[tuple[str, float | None]] = [("weights", 0.0), ("kv_cache", 41.2), ("cuda_graphs", 44.4)]
    assert phase_bar(starts) == "weights 41s · kv 3.2s · graphs …"
    finished = [*starts, ("http", 56.4), ("warmup", 57.0), ("ready", 58.0)]
    assert phase_bar(finished) == "weights 41s · kv 3.2s · graphs 12s · http 0.6s · warm-up 1.0s"


def test_the_phase_under_way_shows_how_long_it_has_run_and_its_last_length():
    starts: list[tuple[str, float | None]] = [("weights", 0.0), ("cuda_graphs", 41.0)]
    assert phase_bar(starts, running=130.0) == "weights 41s · graphs 2m10s…"
    assert phase_bar(starts, {"weights": 40.0, "cuda_graphs": 41.0}, running=130.0) == \
        "weights 41s (last 40s) · graphs 2m10s… (last 41s, 3.2×)"


def test_lengths_read_short():
    assert [took(s) for s in (0.42, 41.4, 125, 3725)] == ["0.4s", "41s", "2m05s", "1h02m"]



def test_the_phase_bar_says_how_long_each_phase_took_last_time_and_flags_a_slow_one():
    from pdtui.faces.timeline import phase_bar
    starts = [("weights", 0.0), ("kv_cache", 41.0), ("cuda_graphs", 44.0), ("ready", 46.0)]
    assert phase_bar(starts, {"weights": 39.0, "kv_cache": 0.5}) == \
        "weights 41s (last 39s) · kv 3.0s (last 0.5s, 6.0×) · graphs 2.0s"


def test_a_phase_under_a_second_is_never_slow():
    from pdtui.servers.sglang.phases import slow
    assert not slow(0.4, 0.1) and slow(1.0, 0.3) and not slow(5.0, None) and not slow(2.9, 1.0)


_PLAIN = re.compile("|".join(f"(?P<{p.name}>{p.start.pattern})" for p in PHASES))
_PIECES = [piece for line in [*REAL_LINES, *NOT_PHASES] for piece in re.split(r"(?<=[ .])", line)]


@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=8)), max_size=12))
def test_the_hints_looked_for_first_never_hide_a_phase_line(parts):
    """``phase_of`` looks for its hints before its patterns: it answers exactly as the patterns alone."""
    line = "".join(parts)
    found = _PLAIN.search(line)
    assert phase_of(line) == (found.lastgroup if found else None)


@pytest.mark.parametrize("line", [
    "[2026-12-05 10:00:00] Dummy health check server started in background thread at 0.0.0.0:30000",
    "[2025-06-01 10:00:00] Starting dummy health check server at 0.0.0.0:30000",
])
def test_a_rank_above_0_ends_its_start_up_at_its_dummy_health_server(line):
    """It never prints the ready line: its schedulers are ready when its dummy health server starts."""
    assert phase_of(line) == "ready"
