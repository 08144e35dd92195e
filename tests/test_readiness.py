from pdtui.engine.events import LineKind
from pdtui.engine.readiness import FailureCandidate, LineJudge, failure_signatures

SGLANG = LineJudge("fired up and ready", failure_signatures("decode"))


def test_ready_line():
    assert SGLANG.kind("[2025-02-17 05:27:32] The server is fired up and ready to roll!") is LineKind.READY


def test_failure_lines_from_the_facts():
    lines = {
        "[2026-04-15 08:41:05] Prefill disaggregation mode warm Up Failed, status code: 400": "PD warm-up failed",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.": "CUDA out of memory",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.": "not enough GPU memory",
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)": "NCCL error",
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use":
            "port already in use",
        "[2025-02-09 21:23:00 TP2] Scheduler hit an exception: Traceback (most recent call last):": "scheduler crashed",
        "[2024-12-13 01:47:34] Initialization failed. warmup error: Traceback (most recent call last):":
            "initialization failed",
        "Decode handshake failed ... KVTransferError(bootstrap_room=1): Could not fetch": "KV transfer handshake failed",
    }
    for line, reason in lines.items():
        assert SGLANG.failure(line).reason == reason, line
        assert SGLANG.kind(line) is LineKind.FAIL


def test_ordinary_lines_are_neither():
    line = "[2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB"
    assert SGLANG.failure(line) is None
    assert SGLANG.kind(line) is LineKind.NORMAL


def test_warning_by_priority_or_text():
    assert SGLANG.kind("something", priority=4) is LineKind.WARN
    assert SGLANG.kind("[x] WARNING: slow") is LineKind.WARN


def test_user_fail_pattern_outranks_defaults():
    judge = LineJudge(None, failure_signatures("prefill", ("my extra failure",)))
    assert judge.failure("Traceback (most recent call last): my extra failure").reason.startswith("matched fail")


def test_most_telling_failure_line_wins():
    judge = SGLANG
    first = "Scheduler hit an exception: Traceback (most recent call last):"
    candidate = FailureCandidate(judge.failure(first), first)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB."
    candidate.consider(judge.failure(oom), oom)
    candidate.consider(judge.failure("Traceback (most recent call last):"), "Traceback (most recent call last):")
    assert candidate.line == oom and candidate.signature.reason == "CUDA out of memory"


def test_other_role_has_no_default_failures():
    assert failure_signatures("other") == ()


def test_prefilter_reads_literal_alternations_and_keeps_real_regexes():
    import re
    from pdtui.engine.readiness import Prefilter, _literals
    assert _literals(r"Traceback \(most recent call last\)") == ["Traceback (most recent call last)"]
    assert _literals("CUDA out of memory|OutOfMemoryError") == ["CUDA out of memory", "OutOfMemoryError"]
    assert _literals(r"\bWARN") is None and _literals("a.b") is None
    prefilter = Prefilter([re.compile("NCCL error"), re.compile(r"step \d+ failed")])
    assert prefilter.may_match("RuntimeError: NCCL error: unhandled")
    assert prefilter.may_match("step 12 failed") and not prefilter.may_match("step x failed")


def test_user_regex_failure_still_found_past_the_prefilter():
    judge = LineJudge(r"ready\s+to\s+roll", failure_signatures("decode", (r"step \d+ failed",)))
    assert judge.kind("step 7 failed") is LineKind.FAIL
    assert judge.kind("ready   to  roll") is LineKind.READY
    assert judge.kind("an ordinary line", priority=3) is LineKind.WARN
