"""A generation is proven by its tokens and its finish, wherever its text landed (checks/generation.py)."""

from __future__ import annotations

import json

import pytest

from pdtui.engine.checks.generation import SMOKE_PROMPT, UNKNOWN_PAGE, judge, smoke_prompt
from pdtui.hosts.http import HttpResult


def answered(payload: object, status: int = 200) -> HttpResult:
    return HttpResult(status, json.dumps(payload).encode(), 0.05)


def chat(message: dict, finish: str | None = "length", tokens: int | None = 4) -> dict:
    body: dict = {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if tokens is not None:
        body["usage"] = {"prompt_tokens": 1034, "completion_tokens": tokens, "total_tokens": 1034 + tokens}
    return body


@pytest.mark.parametrize("content", [None, ""], ids=["0.4-null", "0.5-empty"])
def test_a_reasoning_only_answer_is_a_generation(content):
    verdict = judge(answered(chat({"role": "assistant", "content": content, "reasoning_content": "Okay, the"})))
    assert verdict.ok
    assert verdict.detail == "4 tokens (finish length, 'Okay, the' in reasoning_content)"
    assert verdict.prompt_tokens == 1034


def test_an_answer_in_content_names_it():
    verdict = judge(answered(chat({"role": "assistant", "content": "OK"}, finish="stop", tokens=1)))
    assert verdict.ok and verdict.detail == "1 token (finish stop, 'OK' in content)"


def test_tokens_without_any_text_still_prove_the_path():
    verdict = judge(answered(chat({"role": "assistant", "content": "", "reasoning_content": None})))
    assert verdict.ok and verdict.detail == "4 tokens (finish length, no text)"


def test_an_http_200_with_no_tokens_is_refused_quoting_the_answer():
    verdict = judge(answered(chat({"role": "assistant", "content": ""}, finish="abort", tokens=0)))
    assert not verdict.ok
    assert verdict.detail.startswith("HTTP 200, finish_reason 'abort' after 0 tokens: {\"choice\":{\"message\":")
    assert '"completion_tokens":0' in verdict.detail


def test_a_normal_finish_with_zero_tokens_is_refused():
    verdict = judge(answered(chat({"role": "assistant", "content": ""}, finish="stop", tokens=0)))
    assert not verdict.ok and verdict.detail.startswith("HTTP 200 with 0 tokens (finish stop): ")


def test_smg_grpc_error_finish_is_refused_even_with_tokens():
    verdict = judge(answered(chat({"role": "assistant", "content": "partial"}, finish="error", tokens=2)))
    assert not verdict.ok and verdict.detail.startswith("HTTP 200, finish_reason 'error' after 2 tokens: ")


def test_an_http_error_is_refused_with_its_status_and_body():
    verdict = judge(HttpResult(503, b'{"error": "No prefill servers available"}', 0.01))
    assert not verdict.ok and verdict.detail == 'HTTP 503: {"error": "No prefill servers available"}'


def test_no_http_answer_at_all_is_refused_with_why():
    verdict = judge(HttpResult(None, b"", 30.0, "no answer in 30 s"))
    assert not verdict.ok and verdict.detail == "no answer in 30 s"


def test_an_answer_that_is_not_a_generation_is_refused():
    verdict = judge(HttpResult(200, b"<html>gateway</html>", 0.01))
    assert not verdict.ok and verdict.detail == "no generation in the answer: HTTP 200: <html>gateway</html>"


def test_completions_and_native_generate_answers_are_read_too():
    completion = {"choices": [{"text": " OK", "finish_reason": "length"}],
                  "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
    native = [{"text": " OK", "meta_info": {"finish_reason": {"type": "length", "length": 4}, "prompt_tokens": 3,
                                            "completion_tokens": 4}}]
    assert judge(answered(completion)).detail == "4 tokens (finish length, 'OK' in text)"
    assert judge(answered(native)).detail == "4 tokens (finish length, 'OK' in text)"


def test_an_answer_without_usage_is_judged_by_its_text_and_says_so():
    verdict = judge(answered(chat({"role": "assistant", "content": "OK"}, tokens=None)))
    assert verdict.ok and verdict.detail == "tokens not counted (no usage) (finish length, 'OK' in content)"
    empty = judge(answered(chat({"role": "assistant", "content": None}, tokens=None)))
    assert not empty.ok and empty.detail.startswith("HTTP 200, no tokens counted and no text: ")


def test_a_long_hostile_answer_is_quoted_on_one_line_and_cut():
    message = {"role": "assistant", "content": "\x1b[31m[bold]x[/bold]\n" * 100}
    verdict = judge(answered(chat(message, finish="abort", tokens=0)))
    assert "\n" not in verdict.detail and verdict.detail.endswith("…") and len(verdict.detail) < 320


@pytest.mark.parametrize("page", [1, 16, 32, 64, 128, 256, None])
def test_the_smoke_prompt_fills_two_kv_pages_and_part_of_a_third_and_no_more(page):
    # a word or a number is at least a token with any tokenizer; the list's items are a number and a word each
    items = [item for item in smoke_prompt(page).split(": ", 1)[1].split(", ")]
    assert len(items) * 2 >= 2 * (page or UNKNOWN_PAGE) + 16
    assert len(items) * 2 <= max(64, 2 * (page or UNKNOWN_PAGE) + 16) + 1, "no longer than that"
    assert SMOKE_PROMPT == smoke_prompt(UNKNOWN_PAGE)


def test_an_error_answer_is_quoted_by_its_message():
    body = {"object": "error", "message": "Decode transfer failed for request rank=0\n with exception X",
            "type": "InternalServerError", "param": None, "code": 500}
    verdict = judge(answered(body, status=500))
    assert verdict.detail == "HTTP 500: Decode transfer failed for request rank=0 with exception X"
    openai = judge(answered({"error": {"message": "No available workers", "type": "service_unavailable"}}, 503))
    assert openai.detail == "HTTP 503: No available workers"
