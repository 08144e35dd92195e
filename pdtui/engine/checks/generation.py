"""A generation proven by its tokens: what the smoke and canary requests send, and how the answer is judged.

A generation through PD proves the path when the server says it produced
tokens (``usage.completion_tokens`` > 0) and finished normally
(``finish_reason`` ``stop`` or ``length``), wherever the text landed: with a
reasoning parser every token of a short answer is in ``reasoning_content`` and
``content`` is null (SGLang 0.4) or empty (0.5). It fails on an HTTP error, a
finish of ``abort`` (SGLang's graceful abort: HTTP 200, maybe nothing
generated) or ``error`` (smg's gRPC workers), or no tokens; the answer is
quoted. An answer that carries no ``usage`` at all (a proxy that strips it)
is judged by its text and its finish, and says that its tokens were not counted.

The smoke prompt fills two of the pair's KV pages and part of a third, with
any tokenizer, so real pages move from prefill to decode, and no more: a
CPU server takes seconds over a prompt of thousands of tokens (real vLLM here:
18.4 s for 4,135), which prove nothing more. Where no server tells its page
size, pages of 256 tokens are assumed (the largest in use). The canary, sent
every half minute, stays tiny.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pdtui.hosts.http import HttpResult

GOOD_FINISH = ("stop", "length")
MAX_TOKENS = 4
QUOTE_LIMIT = 240       # characters of an answer quoted in a failing check's line
CANARY_PROMPT = "Say OK."
TEXT_FIELDS = ("content", "reasoning_content", "text")
# Plain words and numbers, at least two tokens a numbered item with any tokenizer (a number and a word).
_ITEMS = ("amber", "basalt", "cedar", "delta", "ember", "fjord", "granite", "harbor")
UNKNOWN_PAGE = 256      # tokens a KV page is taken to hold where no server tells (the largest in use)
SMOKE_TOKENS = 64       # the fewest prompt tokens a smoke asks for, whatever the page


def smoke_tokens(page: int | None) -> int:
    """How many prompt tokens the smoke needs at least: two full pages of ``page`` tokens and part of a third."""
    return max(SMOKE_TOKENS, 2 * (page or UNKNOWN_PAGE) + 16)


def smoke_prompt(page: int | None) -> str:
    """A prompt of at least :func:`smoke_tokens` tokens with any tokenizer: a numbered list, half as many items."""
    items = -(-smoke_tokens(page) // 2)
    return ("Here is a list: " + ", ".join(f"{n} {_ITEMS[n % len(_ITEMS)]}" for n in range(1, items + 1))
            + ". Reply with the single word OK.")


SMOKE_PROMPT = smoke_prompt(None)


def request_body(model: str, prompt: str) -> dict[str, Any]:
    """A chat completion of a few tokens, greedy (the same answer each time)."""
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS,
            "temperature": 0}


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    detail: str                 # what the answer proved, or why it proves nothing (the answer quoted)
    prompt_tokens: int | None = None
    counted: str = ""           # a proof's tokens ("4 tokens"), and what else it showed (finish, where the text is)
    shown: str = ""


def _proof(counted: str, shown: str, prompt: int | None) -> Verdict:
    return Verdict(True, f"{counted} ({shown})", prompt, counted, shown)


def judge(result: HttpResult) -> Verdict:
    """Whether this answer of a router or server is a generation: tokens produced, finished normally."""
    if not result.ok:
        said = error_message(result)
        return Verdict(False, f"HTTP {result.status}: {said}" if said else result.describe())
    payload = result.json()
    choice = _first_choice(payload)
    if choice is None:
        return Verdict(False, f"no generation in the answer: {result.describe()}")
    finish = _finish_reason(choice)
    tokens, prompt = _usage(payload, choice)
    text, where = _text(choice)
    if finish not in GOOD_FINISH:
        return Verdict(False, f"HTTP {result.status}, finish_reason {finish!r} after {_count(tokens)}: "
                              f"{_quote(payload, choice)}", prompt)
    if tokens is None:
        if not text:
            return Verdict(False, f"HTTP {result.status}, no tokens counted and no text: {_quote(payload, choice)}",
                           prompt)
        return _proof("tokens not counted (no usage)", f"finish {finish}, {text[:40]!r} in {where}", prompt)
    if tokens <= 0:
        return Verdict(False, f"HTTP {result.status} with 0 tokens (finish {finish}): {_quote(payload, choice)}",
                       prompt)
    said = f"{text[:40]!r} in {where}" if text else "no text"
    return _proof(_count(tokens), f"finish {finish}, {said}", prompt)


def error_message(result: HttpResult, limit: int | None = QUOTE_LIMIT) -> str | None:
    """The message of an error answer (SGLang's ``{"object": "error", "message": ...}``, OpenAI's ``{"error":
    {"message": ...}}``, FastAPI's ``{"detail": ...}``), on one line, cut at ``limit``; None otherwise."""
    if result.status is None:
        return None
    payload = result.json()
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        payload = payload["error"]
    message = payload.get("message", payload.get("detail")) if isinstance(payload, dict) else None
    if not isinstance(message, str) or not message.strip():
        return None
    message = " ".join(message.split())
    return message if limit is None else _cut(message, limit)


def _quote(payload: Any, choice: dict, limit: int = QUOTE_LIMIT) -> str:
    """What the answer said that matters (its choice and usage), as compact JSON on one line, cut at ``limit``."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    said = {"choice": {k: v for k, v in choice.items() if k not in ("index", "logprobs")}}
    if usage is not None:
        said["usage"] = usage
    return _cut(json.dumps(said, ensure_ascii=False, separators=(",", ":"), default=str), limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _count(tokens: int | None) -> str:
    if tokens is None:
        return "no token count"
    return f"{tokens} token" + ("" if tokens == 1 else "s")


def _first_choice(payload: Any) -> dict | None:
    """The answer's first choice (OpenAI's chat and completions), or SGLang's native ``/generate`` object."""
    if isinstance(payload, list) and payload and isinstance(payload[0], dict):
        payload = payload[0]
    if not isinstance(payload, dict):
        return None
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return payload if isinstance(payload.get("meta_info"), dict) else None


def _finish_reason(choice: dict) -> str | None:
    finish = choice.get("finish_reason")
    if finish is None and isinstance(choice.get("meta_info"), dict):
        finish = choice["meta_info"].get("finish_reason")
    if isinstance(finish, dict):          # SGLang's /generate: {"type": "length", "length": 4}
        finish = finish.get("type")
    return finish if isinstance(finish, str) else None


def _usage(payload: Any, choice: dict) -> tuple[int | None, int | None]:
    """The completion's and the prompt's tokens, as the server counted them (None where it did not say)."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        usage = choice.get("meta_info") if isinstance(choice.get("meta_info"), dict) else None
    if not isinstance(usage, dict):
        return None, None
    return _int(usage.get("completion_tokens")), _int(usage.get("prompt_tokens"))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(choice: dict) -> tuple[str, str]:
    """The first non-empty text of the answer and the field it is in (the message's, else the choice's)."""
    message = choice.get("message")
    places = [message] if isinstance(message, dict) else []
    for place in [*places, choice]:
        for name in TEXT_FIELDS:
            value = place.get(name)
            if isinstance(value, str) and value.strip():
                return value.strip(), name
    return "", "content"
