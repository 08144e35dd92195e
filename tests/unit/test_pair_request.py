"""A pair is proven by its serving engine's own request: SGLang's to both sides at once, another engine's as its
router sends it (vLLM's: the prefill's leg first, its answer carried to the decode's)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from pdtui.engine.checks.generation import MAX_TOKENS
from pdtui.engine.checks.pairs import PairEnds, prove_pair
from pdtui.hosts.http import HttpResult
from pdtui.servers import PairAnswers, PairSend, serving_named
from pdtui.servers.sglang.engine import ENGINE as SGLANG

GENERATION = {"choices": [{"text": " fox", "finish_reason": "length"}], "usage": {"completion_tokens": 4}}


class Prober:
    """Answers each POST with ``answer(path, body)``, keeping the order of the requests."""

    def __init__(self, name: str, answer, sent: list) -> None:
        self.name, self.answer, self.sent = name, answer, sent

    async def request(self, method: str, port: int, path: str, *, body: dict | None, timeout: float,
                      address: str) -> HttpResult:
        self.sent.append((self.name, path, body))
        await asyncio.sleep(0)
        status, payload = self.answer(path, body)
        return HttpResult(status, json.dumps(payload).encode(), 0.01)


def ends(prefill_answer, decode_answer) -> tuple[PairEnds, list]:
    sent: list = []

    def end(name: str, answer) -> Any:
        return SimpleNamespace(cfg=SimpleNamespace(name=name, port=30000), address="127.0.0.1",
                               prober=Prober(name, answer, sent))

    return PairEnds(end("prefill", prefill_answer), end("decode", decode_answer), "10.0.0.1", 8998), sent


async def test_sglang_sends_one_request_to_both_sides_naming_the_prefills_bootstrap():
    pair, sent = ends(lambda *_: (200, {"text": ""}), lambda *_: (200, GENERATION))
    result = await prove_pair(pair, SGLANG.pair, clock=lambda: 0.0)
    assert result.ok, result
    (_, path_p, body_p), (_, path_d, body_d) = sorted(sent, key=lambda s: s[0] != "prefill")
    assert path_p == path_d == "/generate" and body_p is body_d
    assert (body_p["bootstrap_host"], body_p["bootstrap_port"]) == ("10.0.0.1", 8998)


async def test_an_sglang_sides_transfer_error_answer_names_its_room():
    error = {"object": "error", "message": "KVTransferError(bootstrap_room=7): Failed to get kvcache from prefill"}
    pair, _ = ends(lambda *_: (200, {"text": ""}), lambda *_: (500, error))
    result = await prove_pair(pair, SGLANG.pair, clock=lambda: 0.0)
    assert not result.ok and result.detail.startswith("KV transfer failed: decode: "), result.detail


async def two_legs(send: PairSend, prompt: str, *, max_new_tokens: int, bootstrap: tuple[str, int]) -> PairAnswers:
    """vLLM's router's way: the prefill's leg (one token, asked to keep its KV for a remote decode), then the
    decode's with what the prefill's answer says of its KV."""
    leg = {"prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
    prefilled = await send("prefill", "/v1/completions", leg)
    params = (prefilled.json() or {}).get("kv_transfer_params")
    decoded = await send("decode", "/v1/completions",
                         {"prompt": prompt, "max_tokens": max_new_tokens, "kv_transfer_params": params})
    return PairAnswers(prefilled, decoded)


async def test_another_engine_sends_its_legs_in_its_order_and_the_pair_is_judged_by_the_decodes_tokens():
    params = {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": 15600}
    pair, sent = ends(lambda *_: (200, {"kv_transfer_params": params, **GENERATION}), lambda *_: (200, GENERATION))
    result = await prove_pair(pair, two_legs, clock=lambda: 0.0)
    assert result.ok, result
    assert [(name, body["max_tokens"]) for name, _, body in sent] == [("prefill", 1), ("decode", MAX_TOKENS)]
    assert sent[1][2]["kv_transfer_params"] == params


async def test_an_engine_whose_answers_never_name_a_transfer_is_judged_by_the_decodes_answer_alone():
    pair, _ = ends(lambda *_: (200, {"kv_transfer_params": {}}),
                   lambda *_: (500, {"error": {"message": "Internal server error"}}))
    result = await prove_pair(pair, two_legs, clock=lambda: 0.0)
    assert not result.ok and result.detail == "HTTP 500: Internal server error", result.detail


def vllm_server(side: str, *, params: dict | None = None):
    """A vLLM server's answers: its model list, and a prefill leg's kv_transfer_params (when it runs a producer)."""
    def answer(path: str, body: dict | None):
        if body is None:
            return 200, {"object": "list", "data": [{"id": "tiny", "root": "/models/tiny"}]}
        extra = {"kv_transfer_params": params} if side == "prefill" and params is not None else {}
        return 200, {**GENERATION, **extra}
    return answer


async def test_vllm_pairs_by_the_prefills_leg_then_the_decodes_with_what_the_prefill_said_of_its_kv():
    params = {"do_remote_prefill": True, "remote_engine_id": "e1", "remote_host": "127.0.0.1", "remote_port": 5600}
    pair, sent = ends(vllm_server("prefill", params=params), vllm_server("decode"))
    result = await prove_pair(pair, serving_named("vllm").pair, clock=lambda: 0.0)
    assert result.ok, result
    assert [(name, path) for name, path, _ in sent] == [("prefill", "/v1/models"), ("prefill", "/v1/completions"),
                                                         ("decode", "/v1/completions")]
    assert sent[1][2]["model"] == sent[2][2]["model"] == "tiny"
    assert sent[1][2]["kv_transfer_params"]["do_remote_decode"] is True and sent[2][2]["kv_transfer_params"] == params


async def test_a_vllm_prefill_that_keeps_no_kv_for_a_decode_fails_its_pairs_without_asking_the_decode():
    pair, sent = ends(vllm_server("prefill"), vllm_server("decode"))
    result = await prove_pair(pair, serving_named("vllm").pair, clock=lambda: 0.0)
    assert not result.ok and "without kv_transfer_params" in result.detail
    assert [name for name, _, _ in sent] == ["prefill", "prefill"]
