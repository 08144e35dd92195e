"""SGLang's PD request: one generation sent to a prefill and a decode at once, paired by its bootstrap fields.

The router pairs a prefill with a decode by sending both the same request
with ``bootstrap_host`` and ``bootstrap_port`` (where the decode finds the
prefill's bootstrap server) and a ``bootstrap_room`` (the id both sides give
the transfer). The decode answers with the generation; the prefill answers
once its KV has gone. Sent by pdtui to one prefill and one decode directly,
it proves that pair, whatever the router would choose.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from pdtui.servers import PairAnswers, PairSend

GENERATE = "/generate"
ROOM = "bootstrap_room="
"""What SGLang's transfer errors name a request by (its log lines, and a failed side's answer)."""


def new_room() -> int:
    """A transfer's id, as the router draws one (a random non-negative 63-bit integer)."""
    return random.getrandbits(63)


def pd_generate(prompt: str, *, bootstrap_host: str, bootstrap_port: int,
                max_new_tokens: int) -> tuple[str, dict[str, Any]]:
    """The path and the native ``/generate`` body both sides of a pair get (greedy, a fresh room)."""
    return GENERATE, {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
                      "bootstrap_host": bootstrap_host, "bootstrap_port": bootstrap_port, "bootstrap_room": new_room()}


async def pair(send: PairSend, prompt: str, *, max_new_tokens: int, bootstrap: tuple[str, int]) -> PairAnswers:
    """The same request to both sides at once, as the router sends it: a transfer error names its room."""
    path, body = pd_generate(prompt, bootstrap_host=bootstrap[0], bootstrap_port=bootstrap[1],
                             max_new_tokens=max_new_tokens)
    prefilled, decoded = await asyncio.gather(send("prefill", path, body), send("decode", path, body))
    return PairAnswers(prefilled, decoded, f"{ROOM}{body['bootstrap_room']}", ROOM)
