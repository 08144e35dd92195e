"""A config's regular expressions may not take exponential time: the shapes that can are refused at load."""

from __future__ import annotations

import pytest

from pdtui.config import ConfigError, parse_config
from pdtui.config.regex import hazard

CONFIG = """\
name: demo
hosts:
  gpu0: {local: true}
services:
  prefill:
    host: gpu0
    unit: sglang-prefill
    role: prefill
    fail: ['CUDA out of memory', {pattern}]
    ready:
      log: {pattern}
"""

EXPONENTIAL = [r"(a+)+$", r"(a*)*", r"(a|a)*", r"(a|aa)+$", r"(a{1,10}){1,10}$", r"((a{1,3}){1,3}){1,3}",
               r"(\d+|x)*", r"(.|\n)*x", r"(?:x(?:y|yz)*)+", r"^(\w+\s?)*$", r"(?=(a+)+)b"]
FINE = [r"CUDA out of memory", r"Traceback \(most recent call last\)", r".*error.*", r"(RuntimeError|ValueError): .*",
        r"Uvicorn running on .*:(\d+)", r"(?i)(error|fatal)\b", r"(\d{1,3}\.){3}\d{1,3}", r"(foo|bar)*",
        r'"([^"\\]|\\.)*"', r"(?>a+)+", r"(a++)+", r"(a|[b-d]|e)*", r"(a)\1*"]


@pytest.mark.parametrize("pattern", EXPONENTIAL)
def test_a_shape_that_can_take_exponential_time_is_named(pattern: str) -> None:
    assert hazard(pattern)


@pytest.mark.parametrize("pattern", FINE)
def test_the_shapes_of_everyday_patterns_pass(pattern: str) -> None:
    assert hazard(pattern) is None


@pytest.mark.parametrize("where", ["fail", "ready"])
def test_a_config_with_one_is_refused_where_it_is_written(where: str) -> None:
    fine, bad = "'Traceback'", "'(a+)+$'"
    text = CONFIG.replace("{pattern}]", bad + "]" if where == "fail" else fine + "]")
    text = text.replace("log: {pattern}", f"log: {bad if where == 'ready' else fine}")
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "t.yaml")
    line, col = (9, 34) if where == "fail" else (11, 12)
    assert (caught.value.line, caught.value.col) == (line, col)
    assert "cannot take exponential time, got '(a+)+$': it has a repeat inside a repeat" in caught.value.message
