"""Serving figures read from Prometheus text (prometheus_client's own exposition) and from batch lines."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from pdtui.engine.figures import failed_transfers
from pdtui.engine.service_run import Attempt
from pdtui.engine.startup_watch import StartupWatch
from pdtui.servers.prometheus import histogram_quantile
from pdtui.servers.sglang.engine import ENGINE as SGLANG
from pdtui.servers.sglang.metrics import (
    batch_figures,
    batch_line,
    figures_between,
    parse_metrics,
    router_figures_between,
)
from pdtui.vocabulary.figures import Figures

TTFT_BUCKETS = (0.05, 0.1, 0.2, 0.5, 1.0)


class Server:
    """A registry exposing SGLang's metric names as a server does."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "tp_rank"]
        self.running = Gauge("sglang:num_running_reqs", "running", labels, registry=self.registry)
        self.queued = Gauge("sglang:num_queue_reqs", "queued", labels, registry=self.registry)
        self.usage = Gauge("sglang:token_usage", "usage", labels, registry=self.registry)
        self.generated = Counter("sglang:generation_tokens", "generated", ["model_name"], registry=self.registry)
        self.prompt = Counter("sglang:prompt_tokens", "prompt", ["model_name"], registry=self.registry)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "ttft", ["model_name"], registry=self.registry,
                              buckets=TTFT_BUCKETS)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def test_gauges_are_read_from_rank_zero_and_rates_from_counters_between_samples() -> None:
    server = Server()
    for rank in ("0", "1"):      # every rank of one scheduler may report the same figures
        server.running.labels("m", rank).set(12)
        server.queued.labels("m", rank).set(3)
        server.usage.labels("m", rank).set(0.25)
    server.generated.labels("m").inc(1000)
    server.prompt.labels("m").inc(4000)
    first = parse_metrics(server.text(), at=10.0)
    server.generated.labels("m").inc(1600)
    server.prompt.labels("m").inc(2000)
    second = parse_metrics(server.text(), at=12.0)
    figures = figures_between(first, second)
    assert figures == Figures(generation_tps=800.0, running=12, queued=3, token_usage=0.25, ttft_p50=None)
    assert figures_between(first, second, "prefill") == Figures(prompt_tps=1000.0, running=12, queued=3,
                                                                token_usage=0.25), "a prefill generates nothing"
    assert figures_between(None, second).generation_tps is None, "a rate needs two samples"


def test_the_gen_throughput_gauge_wins_over_the_counter_rate() -> None:
    server = Server()
    Gauge("sglang:gen_throughput", "tps", ["model_name"], registry=server.registry).labels("m").set(812.44)
    first = parse_metrics(server.text(), at=0.0)
    server.generated.labels("m").inc(10)
    assert figures_between(first, parse_metrics(server.text(), at=1.0)).generation_tps == 812.44


def test_ttft_p50_covers_the_requests_since_the_last_sample() -> None:
    server = Server()
    for seconds in (0.03, 0.04, 0.06):
        server.ttft.labels("m").observe(seconds)
    first = parse_metrics(server.text(), at=0.0)
    assert figures_between(None, first).ttft_p50 == pytest.approx(0.05 * 1.5 / 2)   # within (0, 0.05]
    for seconds in (0.3, 0.4, 0.45, 0.6):
        server.ttft.labels("m").observe(seconds)
    second = parse_metrics(server.text(), at=2.0)
    assert figures_between(first, second).ttft_p50 == pytest.approx(0.2 + 0.3 * (2 / 3))
    assert figures_between(second, parse_metrics(server.text(), at=4.0)).ttft_p50 is None, "no new request"


def test_text_that_is_not_prometheus_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics("<html>not found</html>\n{", at=0.0)


def test_a_family_pdtui_does_not_read_is_never_parsed() -> None:
    """Only the families a reading takes figures from reach the parser: a malformed one it never reads (a newer
    release's) leaves the figures whole."""
    server = Server()
    server.running.labels("m", "0").set(3)
    text = server.text() + "# TYPE sglang:some_new_family gauge\nsglang:some_new_family{broken 1\n"
    with pytest.raises(ValueError):
        parse_metrics(server.text() + "sglang:num_running_reqs{broken 1\n", at=0.0)
    assert figures_between(None, parse_metrics(text, at=0.0)).running == 3


@given(st.lists(st.floats(min_value=0.0, max_value=2.0, allow_nan=False), min_size=1, max_size=60),
       st.floats(min_value=0.01, max_value=0.99))
def test_the_quantile_lies_in_the_bucket_that_holds_it(values: list[float], q: float) -> None:
    bounds = [*TTFT_BUCKETS, math.inf]
    buckets = [(le, float(sum(v <= le for v in values))) for le in bounds]
    got = histogram_quantile(q, buckets)
    assert got is not None
    exact = sorted(values)[max(0, math.ceil(q * len(values)) - 1)]
    upper = next(le for le in bounds if exact <= le)
    lower = max([0.0, *(le for le in bounds if le < upper)])
    assert lower <= got <= (upper if not math.isinf(upper) else lower)


def test_no_observation_has_no_quantile() -> None:
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.5, []) is None


def test_batch_lines_give_the_figures_they_print() -> None:
    decode = ("[2025-10-16 09:06:41 TP0] Decode batch. #running-req: 12, #token: 5632, token usage: 0.01, "
              "gen throughput (token/s): 812.44, #queue-req: 0")
    prefill = ("[2025-10-16 09:06:41 TP0] Prefill batch. #new-seq: 1, #new-token: 512, #cached-token: 0, "
               "token usage: 0.03, #running-req: 0, #queue-req: 2")
    assert batch_figures(decode) == Figures(generation_tps=812.44, running=12, queued=0, token_usage=0.01)
    assert batch_figures(prefill) == Figures(running=0, queued=2, token_usage=0.03)
    assert batch_figures("The server is fired up and ready to roll!") is None


def test_the_batch_lines_of_0_5_23_give_their_figures() -> None:
    # As a real 0.5.23 prefill printed it on this machine's CPU, and a decode's as its source writes one.
    prefill = ("[2026-12-05 07:58:42] Prefill batch, #new-seq: 1, #new-token: 21, #cached-token: 0, token usage: 0.00, "
               "#running-req: 0, #queue-req: 0, #pending-token: 0, #bootstrap-req: 0, #inflight-req: 1, "
               "#optimistic-req: 0, cpu graph: False, input throughput (token/s): 9.00")
    decode = ("[2026-12-05 07:58:43] Decode batch [7], #running-req: 3, #token: 120, token usage: 0.01, "
              "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, cpu graph: False, "
              "gen throughput (token/s): 33.10, #queue-req: 2")
    assert batch_line(prefill) and batch_line(decode) and not batch_line("Load weight begin. avail mem=18.81 GB")
    assert batch_figures(prefill) == Figures(running=0, queued=0, token_usage=0.0)
    assert batch_figures(decode) == Figures(generation_tps=33.10, running=3, queued=2, token_usage=0.01)


def test_a_routers_figures_are_its_routed_requests_their_p50_in_flight_and_open_circuits() -> None:
    registry = CollectorRegistry()
    routed = Counter("smg_router_requests", "routed", ["model", "endpoint"], registry=registry)
    took = Histogram("smg_router_request_duration_seconds", "took", ["endpoint"], registry=registry,
                     buckets=(0.1, 0.5, 1.0, 2.0))
    active = Gauge("smg_worker_requests_active", "active", ["worker"], registry=registry)
    state = Gauge("smg_worker_cb_state", "state", ["worker"], registry=registry)
    for worker, (in_flight, circuit) in {"http://p:30000": (2, 0), "http://d:30002": (3, 1)}.items():
        active.labels(worker).set(in_flight)
        state.labels(worker).set(circuit)
    routed.labels("m", "chat").inc(10)
    first = parse_metrics(generate_latest(registry).decode(), at=0.0)
    routed.labels("m", "chat").inc(8)
    for seconds in (0.3, 0.4, 0.7, 1.5):
        took.labels("chat").observe(seconds)
    second = parse_metrics(generate_latest(registry).decode(), at=4.0)
    figures = router_figures_between(first, second)
    assert figures == Figures(running=5, requests_ps=2.0, latency_p50=pytest.approx(0.5), open_circuits=1)


HOSTILE = ["# TYPE x histogram\nx_bucket 1\n", '# TYPE x histogram\nx_bucket{le="abc"} 1\n',
           "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs inf\n",
           "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs nan\n", "x 1e999999\n", "\x00\x1b[2J"]


@given(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=300)))
def test_any_text_gives_figures_or_one_of_the_errors_the_watch_expects(text: str) -> None:
    """What a server's /metrics says is read or refused in words the watch catches; never a crash."""
    try:
        sample = parse_metrics(text, at=1.0)
    except (ValueError, KeyError, IndexError, TypeError):
        return
    figures = figures_between(parse_metrics("", at=0.0), sample)
    assert figures.running is None and figures.queued is None, "a value that is not a number is not shown"


def kv_text(mb_per_rank: float, failed: int | None, ranks: int = 2) -> str:
    """A prefill's KV transfer series as SGLang 0.5 exports them: one set per TP rank."""
    registry = CollectorRegistry()
    size = Histogram("sglang:kv_transfer_total_mb", "size", ["tp_rank"], registry=registry, buckets=(10, 100))
    for rank in range(ranks):
        size.labels(str(rank)).observe(mb_per_rank)
    if failed is not None:
        Counter("sglang:num_transfer_failed_reqs", "failed", ["tp_rank"], registry=registry).labels("0").inc(failed)
    return generate_latest(registry).decode()


def test_a_prefills_kv_rate_is_every_ranks_share_over_the_interval_and_its_failures_counted() -> None:
    first = parse_metrics(kv_text(0.0, None), at=10.0)
    later = parse_metrics(kv_text(512.0, 2), at=12.0)    # two ranks sent 512 MB each in two seconds
    figures = figures_between(first, later, "prefill")
    assert figures.kv_gbps == pytest.approx(0.5) and figures.kv_failed == 2


def test_a_server_without_the_kv_series_shows_no_kv_figures() -> None:
    server = Server()
    figures = figures_between(parse_metrics(server.text(), 1.0), parse_metrics(server.text(), 2.0), "prefill")
    assert figures.kv_gbps is None and figures.kv_failed is None


@pytest.mark.parametrize(("before", "now", "told"), [(0, 1, True), (1, 5, False), (5, 12, True), (12, 12, False),
                                                     (0, None, False), (99, 100, True), (100, 250, False)])
def test_failed_transfers_are_told_at_the_first_tenth_and_hundredth(before: int, now: int | None, told: bool) -> None:
    words = failed_transfers("decode-1", before, now, SGLANG.failed_transfers_series)
    assert (words is not None) == told
    if told:
        assert words == (f"decode-1: KV transfers failing: {now} since it started "
                         f"(sglang:num_transfer_failed_reqs_total), {now - before} since the last sample")


def test_a_batch_line_is_read_only_when_its_figures_are_asked_for_and_an_unreadable_one_leaves_the_last() -> None:
    attempt = Attempt(StartupWatch(SGLANG, SGLANG.phase_tracker(), None, {}, watched=False))
    read: list[str] = []

    def parse(line: str) -> Figures | None:
        read.append(line)
        return batch_figures(line)

    for n in range(3):
        attempt.batch_line = f"Decode batch. #running-req: {n}, #token: 10, token usage: 0.01, #queue-req: 0"
    assert read == []
    assert attempt.batch(parse) == Figures(running=2, queued=0, token_usage=0.01)
    assert len(read) == 1, "only the latest line is read"
    attempt.batch_line = "Decode batch. #running-req: 1.5.0"     # not a number: no figures
    assert attempt.batch(parse) == Figures(running=2, queued=0, token_usage=0.01)
    assert attempt.batch(parse) == Figures(running=2, queued=0, token_usage=0.01) and len(read) == 2
