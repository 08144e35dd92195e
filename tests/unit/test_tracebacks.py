"""A traceback's exception found among a crashing server's lines, as real users' servers printed them."""

from __future__ import annotations

import pytest

from pdtui.engine.tracebacks import TracebackWatch, exception_of, ranks_of


@pytest.mark.parametrize(("line", "text"), [
    ("RuntimeError: Mooncake memory registration failed.", "RuntimeError: Mooncake memory registration failed."),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB.",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB."),
    ("nixl._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND", "nixl._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND"),
    ("AssertionError", "AssertionError"),
    ("AssertionError: res=<Response [403]>", "AssertionError: res=<Response [403]>"),
    ("TimeoutError: timed out", "TimeoutError: timed out"),
    ("Exception: Capture cuda graph failed: CUDA error: out of memory",
     "Exception: Capture cuda graph failed: CUDA error: out of memory"),
    ("[2026-06-09 11:38:45 TP5] RuntimeError: Not enough memory.", "RuntimeError: Not enough memory."),
    ("KeyboardInterrupt", "KeyboardInterrupt"),
])
def test_an_exceptions_own_line_is_read_without_its_prefix(line, text):
    assert exception_of(line) == text


@pytest.mark.parametrize("line", [
    '  File "/sglang/srt/managers/scheduler.py", line 2712, in run_scheduler_process',
    "    raise RuntimeError(f\"Mooncake memory registration failed.\")",
    "[2026-06-09 11:38:45 TP5] Scheduler hit an exception: Traceback (most recent call last):",
    "The above exception was the direct cause of the following exception:",
    "ErrorHandler installed",
    "",
])
def test_frames_code_and_prose_are_no_exception(line):
    assert exception_of(line) is None


@pytest.mark.parametrize(("line", "ranks"), [
    ("[2026-06-09 11:38:45 TP5] Scheduler hit an exception: Traceback (most recent call last):", "TP5"),
    ("[2026-06-09 11:38:45 DP3 TP3 EP3] Scheduler hit an exception: Traceback (most recent call last):", "DP3 TP3 EP3"),
    ("[2026-06-09 11:38:45.123 PP1 TP0] Scheduler hit an exception: Traceback", "PP1 TP0"),
    ("2026-06-09T11:38:45.120Z [2026-06-09 11:38:45 TP5] Scheduler hit an exception: Traceback", "TP5"),
    ("[2026-06-09 11:38:45] Initialization failed. warmup error: Traceback (most recent call last):", None),
])
def test_the_ranks_of_sglangs_prefix(line, ranks):
    assert ranks_of(line) == ranks


def feed(watch: TracebackWatch, lines: list[str]) -> list[str]:
    return [line for t, line in enumerate(lines) if watch.feed(line, float(t))]


def test_the_exception_after_several_ranks_headers_is_the_cause():
    watch = TracebackWatch()
    found = feed(watch, [
        "[2026-06-09 11:38:45 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "[2026-06-09 11:38:45 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 2712, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
        "RuntimeError: Mooncake memory registration failed.",
        "RuntimeError: Mooncake memory registration failed.",
    ])
    assert found == ["RuntimeError: Mooncake memory registration failed."]
    assert watch.cause == "RuntimeError: Mooncake memory registration failed."


def test_a_chained_exception_names_the_last_one():
    watch = TracebackWatch()
    feed(watch, [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "KeyError: 'mooncake'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in g',
        "RuntimeError: KV transfer backend mooncake is not available",
    ])
    assert watch.cause == "RuntimeError: KV transfer backend mooncake is not available"


def test_an_exception_line_outside_a_traceback_is_no_cause():
    watch = TracebackWatch()
    assert feed(watch, ["ValueError: a line that only looks like one"]) == []
    assert watch.cause is None


def test_a_cause_is_recent_only_for_a_while():
    watch = TracebackWatch()
    watch.feed("Traceback (most recent call last):", 0.0)
    watch.feed("RuntimeError: boom", 10.0)
    assert watch.recent_cause(20.0, within=30.0) == "RuntimeError: boom"
    assert watch.recent_cause(100.0, within=30.0) is None
