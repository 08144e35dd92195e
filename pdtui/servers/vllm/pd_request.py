"""vLLM's PD request: a generation's prefill leg, then its decode leg carrying what the prefill said of its KV.

vllm-router (and vLLM's own toy proxy) sends the prompt to the prefill asking for one token and for its KV to be
kept for a remote decode (``kv_transfer_params.do_remote_decode``); the prefill answers with where its KV blocks
are (its engine, blocks, side-channel host and port); the same prompt then goes to the decode with those
parameters, and the decode pulls the KV and generates. Sent by pdtui to one prefill and one decode directly, it
proves that pair, whatever the router would choose. vLLM names no request in its transfer errors' lines, so a
pair's own line cannot be told apart from another's: any transfer error of the pair's two servers counts.
"""

from __future__ import annotations

from typing import Any

from pdtui.servers import PairAnswers, PairSend

COMPLETIONS = "/v1/completions"
MODELS = "/v1/models"


def served_model(answer: Any) -> str | None:
    """The model a ``/v1/models`` answer lists first (a request must name one the server serves)."""
    data = answer.get("data") if isinstance(answer, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    model = first.get("id")
    return model if isinstance(model, str) else None


def prefill_leg(model: str | None, prompt: str) -> dict[str, Any]:
    """One token, and the prompt's KV kept for a decode elsewhere."""
    return {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}


def decode_leg(model: str | None, prompt: str, max_tokens: int, params: Any) -> dict[str, Any]:
    """The generation, its KV taken from the prefill the parameters name."""
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "kv_transfer_params": params}


async def pair(send: PairSend, prompt: str, *, max_new_tokens: int, bootstrap: tuple[str, int]) -> PairAnswers:
    """The prefill's leg, then (once it said where its KV is) the decode's, whose answer is the pair's. A prefill
    that answers without saying fails the pair: the decode would compute the prompt itself, and answer well."""
    model = served_model((await send("prefill", MODELS)).json())
    prefilled = await send("prefill", COMPLETIONS, prefill_leg(model, prompt))
    answer = prefilled.json()
    params = answer.get("kv_transfer_params") if isinstance(answer, dict) else None
    if not prefilled.ok:
        return PairAnswers(prefilled, None)
    if not isinstance(params, dict) or not params:
        return PairAnswers(prefilled, None, failure="the prefill answered without kv_transfer_params: it runs no KV "
                                                    "connector as a producer (its --kv-transfer-config)")
    decoded = await send("decode", COMPLETIONS, decode_leg(model, prompt, max_new_tokens, params))
    return PairAnswers(prefilled, decoded)
