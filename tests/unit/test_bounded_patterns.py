"""A config's patterns are searched with a bound on time: a search cut short matches nothing, and is told once."""

from __future__ import annotations

from pdtui.config.regex import SEARCH_LIMIT, Bounded, hazard
from pdtui.engine.readiness import LineJudge
from pdtui.vocabulary.signatures import Severity, Signature

SLOW = r"(a|aa)+$"            # refused at load (alike alternatives); here to make a search run past the bound
SLOW_LINE = "a" * 40 + "b"


def test_a_search_past_the_bound_matches_nothing_and_says_so() -> None:
    pattern = Bounded(SLOW)
    assert pattern.search(SLOW_LINE) is None and pattern.timed_out
    assert SEARCH_LIMIT < 1


def test_repeats_that_follow_one_another_are_searched_fast_where_re_takes_a_minute() -> None:
    """No shape check refuses them; the regex package searches them in microseconds, and a bound holds anyway."""
    for source, line in [(r"\s*\s*\s*\s*\s*\s*\s*$", " " * 50 + "x"), (r".*a.*a.*a.*a.*b", "a" * 200)]:
        assert hazard(source) is None
        pattern = Bounded(source)
        pattern.search(line)
        assert not pattern.timed_out, source


def test_a_config_pattern_is_matched_as_re_matches_it() -> None:
    assert Bounded(r"(?i)cuda out of MEMORY").search("torch: CUDA out of memory.") is not None
    assert Bounded(r"exit code (\d+)\b").search("exit code 137 ") is not None
    assert Bounded(r"^ready$").search("not ready") is None


def test_the_judge_tells_a_slow_fail_pattern_once_and_judges_the_line_without_it() -> None:
    judge = LineJudge("server is up", (Signature(Bounded(SLOW), "matched fail pattern", 10, Severity.FATAL),))
    assert judge.failure(SLOW_LINE) is None
    assert judge.slow_patterns() == [SLOW]
    judge.failure(SLOW_LINE)
    assert judge.slow_patterns() == []
    assert judge.is_ready_line("the server is up")
