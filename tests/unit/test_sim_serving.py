"""The sim worker's load model on a clock the test moves: phases, capacity, what the figures add up to."""

from __future__ import annotations

import random

import pytest

from pdtui.sim.serving import MAX_TOTAL_TOKENS, WINDOW, Finished, Prefilled, Serving


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def serving(role: str, clock: Clock, capacity: int = 8) -> Serving:
    return Serving(role, capacity, clock=clock, rng=random.Random(7))


def test_a_decode_request_holds_kv_from_its_transfer_and_generates_once_running(clock):
    decode = serving("decode", clock)
    request = decode.arrive(prompt=300, max_tokens=64)
    assert decode.snapshot().decode_prealloc == 1 and decode.snapshot().used_tokens == 0
    decode.move(request, "transfer")
    load = decode.snapshot()
    assert (load.decode_transfer, load.used_tokens, load.running) == (1, 300, 0)
    assert decode.try_start(request)
    clock.sleep(0.5)
    load = decode.snapshot()
    produced = int(0.5 * request.rate)
    assert load.running == 1 and load.used_tokens == 300 + produced
    assert load.token_usage == pytest.approx((300 + produced) / MAX_TOTAL_TOKENS)
    assert load.gen_throughput == pytest.approx(0.5 * request.rate / WINDOW)
    assert load.utilization == pytest.approx(1 / 8)


def test_a_finished_decode_request_is_observed_and_its_tokens_leave_the_window(clock):
    decode = serving("decode", clock)
    seen: list[Finished] = []
    decode.observe = seen.append
    request = decode.arrive(prompt=20, max_tokens=4)
    clock.sleep(0.01)
    decode.try_start(request)
    clock.sleep(4 / request.rate)
    done = decode.finish(request)
    assert seen == [done] and done.generated == 4 and done.prompt == 20
    assert done.time_to_first_token == pytest.approx(0.01 + 1 / request.rate)
    assert done.inter_token == pytest.approx(1 / request.rate)
    assert done.e2e == pytest.approx(0.01 + 4 / request.rate)
    assert decode.snapshot().running == 0 and decode.snapshot().gen_throughput > 0
    clock.sleep(WINDOW + 0.01)
    assert decode.snapshot().gen_throughput == 0


def test_requests_beyond_the_capacity_wait_in_the_queue_until_one_finishes(clock):
    decode = serving("decode", clock, capacity=2)
    first, second, third = (decode.arrive(prompt=10, max_tokens=16) for _ in range(3))
    for request in (first, second, third):
        decode.move(request, "queue")
    assert decode.try_start(first) and decode.try_start(second)
    assert not decode.try_start(third)
    load = decode.snapshot()
    assert (load.running, load.queued, load.utilization) == (2, 1, 1.0)
    decode.finish(first)
    assert decode.try_start(third)
    assert (decode.snapshot().running, decode.snapshot().queued) == (2, 0)


def test_a_fuller_batch_runs_each_request_slower(clock):
    decode = serving("decode", clock, capacity=8)
    rates = []
    for _ in range(8):
        request = decode.arrive(prompt=10, max_tokens=16)
        decode.try_start(request)
        rates.append(request.rate)
    assert rates[-1] < rates[0]


def test_a_prefill_computes_only_what_its_prefix_cache_does_not_hold(clock):
    prefill = serving("prefill", clock)
    system = "You are a helpful assistant."
    for _ in range(2):
        request = prefill.arrive(prompt=105, max_tokens=16, prefix=system, prefix_tokens=5)
        assert prefill.try_start(request)
        prefill.move(request, "inflight")
        assert prefill.snapshot().prefill_inflight == 1 and prefill.snapshot().used_tokens == 105
        done = prefill.finish(request)
    assert done.cached == 5 and done.generated == 0
    assert done.time_to_first_token == pytest.approx((105 - 5) / 10000.0)
    assert prefill.take_prefilled() == Prefilled(seqs=2, new_tokens=205, cached_tokens=5)
    assert prefill.take_prefilled() == Prefilled()
    load = prefill.snapshot()
    assert load.cache_hit_rate == pytest.approx(5 / 210)
    assert (load.utilization, load.gen_throughput, load.running) == (-1.0, 0.0, 0)


def test_serve_yields_each_token_when_due_and_ends_the_request(clock):
    decode = serving("decode", clock)
    seen: list[Finished] = []
    decode.observe = seen.append
    assert list(decode.serve(50, 6, sleep=clock.sleep)) == [0, 1, 2, 3, 4, 5]
    [done] = seen
    assert done.generated == 6 and done.time_to_first_token is not None and done.time_to_first_token > 0
    assert decode.snapshot().running == 0 and not decode.requests


def test_a_client_gone_mid_stream_ends_its_request_with_the_tokens_it_got(clock):
    decode = serving("decode", clock)
    seen: list[Finished] = []
    decode.observe = seen.append
    tokens = decode.serve(50, 64, sleep=clock.sleep)
    assert [next(tokens) for _ in range(3)] == [0, 1, 2]
    assert decode.snapshot().running == 1
    tokens.close()
    assert [d.generated for d in seen] == [3] and not decode.requests


def test_a_prefill_serves_its_phases_and_generates_nothing(clock):
    prefill = serving("prefill", clock)
    seen: list[Finished] = []
    prefill.observe = seen.append
    assert list(prefill.serve(400, 64, sleep=clock.sleep)) == []
    assert [(d.prompt, d.generated) for d in seen] == [(400, 0)]
    assert prefill.take_prefilled().new_tokens == 400


def test_a_prefill_slot_is_free_again_once_the_forward_pass_ends(clock):
    prefill = serving("prefill", clock, capacity=1)
    first, second = prefill.arrive(prompt=500, max_tokens=8), prefill.arrive(prompt=20, max_tokens=8)
    assert prefill.try_start(first) and not prefill.try_start(second)
    prefill.move(first, "inflight")          # its KV is on its way to the decode: it computes no more
    assert prefill.try_start(second)
    assert (prefill.snapshot().running, prefill.snapshot().prefill_inflight) == (1, 1)
