"""A start's silence and slowness, told once each, as pure rules on the moments the run hands them."""

from __future__ import annotations

import math

from pdtui.engine.startup_watch import StartupWatch, stall_after
from pdtui.servers.sglang.engine import ENGINE as SGLANG

GRAPHS = "[2026-05-02 10:00:00 TP0] Capture decode CUDA graph begin. backend=full, avail mem=13.95 GB"
WEIGHTS = "[2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB"
WARMUP = "[2026-05-02 10:00:01] Start of pd disaggregation warmup ..."


def watch(*, last: dict[str, float] | None = None, after: float = 60.0, watched: bool = True) -> StartupWatch:
    return StartupWatch(SGLANG, SGLANG.phase_tracker(), after, last or {}, watched=watched)


def enter(startup: StartupWatch, line: str, now: float) -> None:
    """A line that begins a phase, as the run feeds it."""
    startup.line(now)
    assert startup.phases.feed(line) is not None
    startup.phase_began(now)


def test_the_default_stall_is_a_quarter_of_the_timeout_at_least_a_minute_and_before_the_deadline() -> None:
    assert stall_after(None, 600) == 150
    assert stall_after(None, 120) == 60
    assert stall_after(None, 40) == 20       # half a short timeout: warned before it runs out
    assert stall_after(20, 600) == 20


def test_silence_in_graph_capture_is_told_once_naming_the_phase_and_since_when() -> None:
    startup = watch()
    enter(startup, GRAPHS, now=30.0)
    assert startup.due(started=0.0) == 90.0
    assert startup.warnings(89.0, started=0.0, timeout=300) == []
    told = startup.warnings(90.0, started=0.0, timeout=300)
    assert told == ["no line for 1m in CUDA graph capture (since 0:30): it may be stuck; not ready after 5m it fails"]
    assert startup.warnings(200.0, started=0.0, timeout=300) == []
    assert startup.due(started=0.0) == math.inf
    stall = startup.stall(300.0, started=0.0)
    assert stall is not None
    assert stall.timeout_reason(300) == "not ready after 300s: stuck in CUDA graph capture since 0:30, no line for 4m30s"


def test_a_slow_first_line_and_a_hang_after_it_are_two_stalls_each_told_once() -> None:
    startup = watch(after=2.0)
    assert startup.warnings(2.5, started=0.0, timeout=12) == [
        "no line for 2s in its start (no line yet) (since 0:00): it may be stuck; not ready after 12s it fails"]
    assert startup.due(started=0.0) == math.inf
    startup.line(3.0)                         # a line, but no phase yet: the rendezvous before the first phase line
    assert startup.due(started=0.0) == 5.0
    assert startup.warnings(5.5, started=0.0, timeout=12) == [
        "no line for 2s in distributed init (since 0:00): it may be stuck; not ready after 12s it fails"]
    startup.line(6.0)
    assert startup.warnings(9.0, started=0.0, timeout=12) == []


def test_a_stall_quotes_the_servers_latest_warning_as_its_evidence() -> None:
    startup = watch()
    enter(startup, GRAPHS, now=30.0)
    told = startup.warnings(90.0, started=0.0, timeout=300, evidence="KV pool holds 64 tokens, fewer than ...")
    assert told == ["no line for 1m in CUDA graph capture (since 0:30): it may be stuck; not ready after 5m it fails; "
                    "its last warning: KV pool holds 64 tokens, fewer than ..."]


def test_silence_while_loading_weights_is_no_stall() -> None:
    startup = watch()
    enter(startup, WEIGHTS, now=5.0)
    assert startup.stall(500.0, started=0.0) is None
    assert startup.warnings(500.0, started=0.0, timeout=600) == []


def test_a_start_that_is_no_stall_still_says_where_it_stood() -> None:
    startup = watch()
    enter(startup, WEIGHTS, now=5.0)
    startup.line(38.0)
    where = startup.position(40.0, started=0.0)
    assert where is not None and where.timeout_reason(40) == ("not ready after 40s: in its start-up (weights) since "
                                                              "0:05, no line for 2s")
    enter(startup, "[2026-12-05 07:58:35] Start of pd disaggregation warmup ...", now=39.0)
    where = startup.position(75.0, started=0.0)
    assert where is not None and where.timeout_reason(75) == ("not ready after 75s: in the PD warm-up since 0:39, "
                                                              "no line for 36s")
    assert watch().position(3.0, started=0.0).words == "its start (no line yet)"    # type: ignore[union-attr]
    assert watch(watched=False).position(3.0, started=0.0) is None


def test_a_server_that_never_printed_is_stuck_at_its_start() -> None:
    startup = watch()
    stall = startup.stall(61.0, started=1.0)
    assert stall is not None and stall.words == "its start (no line yet)" and stall.since == 0.0


def test_a_start_moved_back_is_read_at_each_call() -> None:
    startup = watch()
    assert startup.stall(70.0, started=20.0) is None
    assert startup.stall(70.0, started=5.0) is not None


def test_a_router_is_never_called_stalled() -> None:
    startup = watch(watched=False)
    assert startup.stall(1_000.0, started=0.0) is None
    assert startup.due(started=0.0) == math.inf


def test_a_phase_three_times_its_last_length_is_told_once_while_it_runs() -> None:
    startup = watch(last={"cuda_graphs": 40.0}, after=1_000.0)
    enter(startup, GRAPHS, now=10.0)
    assert startup.due(started=0.0) == 130.0          # 3 x 40 s after the phase began
    startup.line(129.0)                                 # it logs all along: no stall, but slow
    assert startup.warnings(129.0, started=0.0, timeout=3_000) == []
    told = startup.warnings(130.0, started=0.0, timeout=3_000)
    assert told == ["graphs running for 2m, 3.0× the last successful run's 40s: it may be stuck"]
    assert startup.warnings(400.0, started=0.0, timeout=3_000) == []


def test_a_last_length_under_a_second_is_told_in_tenths_not_as_0s() -> None:
    startup = watch(last={"warmup": 0.32}, after=1_000.0)
    enter(startup, WARMUP, now=1.0)
    told = startup.warnings(61.0, started=0.0, timeout=3_000)
    assert told == ["warm-up running for 1m, 187.5× the last successful run's 0.3s: it may be stuck"]


def test_a_phase_without_a_last_length_is_never_slow() -> None:
    startup = watch(last={"weights": 40.0}, after=1_000.0)
    enter(startup, GRAPHS, now=10.0)
    assert startup.due(started=0.0) == 1_010.0        # only its stall could be told


def test_a_stuck_line_says_where_the_server_is() -> None:
    startup = watch()
    assert startup.where(serving=False) == "early in its start-up"
    enter(startup, WEIGHTS, now=1.0)
    assert startup.where(serving=False) == "in its start-up (weights)"
    enter(startup, GRAPHS, now=2.0)
    assert startup.where(serving=False) == "in CUDA graph capture"
    assert startup.where(serving=True) == "while serving"
