"""The load generator's pure parts: what it sends and how its arrivals are paced."""

from __future__ import annotations

import io
import random

from pdtui.sim.load import MAX_TOKENS, MIN_TOKENS, SYSTEM_PROMPT, Pacer, Tally, request_body


def test_requests_are_chat_completions_of_varying_length_with_one_system_prompt():
    rng = random.Random(3)
    bodies = [request_body("m/x", rng) for _ in range(200)]
    assert all(b["model"] == "m/x" and b["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
               for b in bodies)
    assert all(MIN_TOKENS <= b["max_tokens"] <= MAX_TOKENS for b in bodies)
    lengths = {len(b["messages"][1]["content"].split()) for b in bodies}
    assert min(lengths) < 20 and max(lengths) > 100
    assert 0 < sum(b["stream"] for b in bodies) < len(bodies)


def test_the_pacer_spaces_arrivals_and_keeps_no_backlog_for_busy_clients():
    now = [10.0]
    pacer = Pacer(2.0, random.Random(5), clock=lambda: now[0])
    delays = [pacer.delay() for _ in range(100)]
    assert delays[0] == 0 and delays == sorted(delays)
    assert 30 < delays[-1] < 70        # 99 gaps of half a second on average
    now[0] += 1000.0                    # every client was busy meanwhile
    assert pacer.delay() == 0


def test_the_tally_writes_a_line_when_the_router_starts_or_stops_answering_and_none_after_closing():
    out = io.StringIO()
    tally = Tally(out)
    for ok in (False, False, True, True, False):
        tally.record(ok, "http://r", "connection refused")
    tally.close()
    tally.record(True, "http://r", "")
    lines = [line.split(" load: ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == ["http://r: connection refused; trying again", "http://r answers: sending",
                     "http://r: connection refused; trying again", "stopped: 2 answered, 3 failed"]
