"""vLLM's serving figures: its /metrics (prometheus_client's own exposition, as vLLM exports it), vllm-router's,
the NIXL KV transfer totals, and the stats line each engine logs (servers/vllm/metrics.py)."""

from __future__ import annotations

from dataclasses import astuple

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest

from pdtui.engine.checks.kv_transfer import kv_seen
from pdtui.servers.vllm.metrics import (
    TRANSFER_FAILED,
    batch_figures,
    batch_line,
    figures_between,
    kv_totals,
    parse_metrics,
    router_figures_between,
)
from pdtui.vocabulary.figures import Figures, KvTotals

TTFT_BUCKETS = (0.05, 0.1, 0.2, 0.5, 1.0)
MIB = 2**20
LABELS = ["model_name", "engine"]


class Server:
    """A registry exposing vLLM 0.32's series as a server does: each labelled by model and engine."""

    def __init__(self, nixl: bool = False, bytes_kind: type[Histogram] | type[Summary] = Histogram) -> None:
        r = self.registry = CollectorRegistry()
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", LABELS,
                             registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", LABELS,
                             registry=r)
        self.usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", LABELS, registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS, registry=r)
        self.generated = Counter("vllm:generation_tokens", "Number of generation tokens processed.", LABELS, registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              LABELS, registry=r, buckets=TTFT_BUCKETS)
        Counter("vllm:external_prefix_cache_hits", "External prefix cache hits, in terms of tokens.", LABELS,
                registry=r).labels("tiny", "0").inc(64)
        if nixl:
            self.xfer = Histogram("vllm:nixl_xfer_time_seconds", "Histogram of transfer duration for NIXL KV Cache "
                                  "transfers.", LABELS, registry=r, buckets=(0.005, 0.01, 0.1, 1.0, 5.0))
            self.moved = bytes_kind("vllm:nixl_bytes_transferred", "Histogram of bytes transferred per NIXL KV Cache "
                                    "transfers.", LABELS, registry=r)
            self.failed = Counter("vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers.", LABELS,
                                  registry=r)
            for engine in ("0", "1"):       # vLLM makes each engine's series at start-up: exported at zero
                for metric in (self.xfer, self.moved, self.failed):
                    metric.labels("tiny", engine)

    def transfer(self, engine: str, size: int, seconds: float = 0.02) -> None:
        self.xfer.labels("tiny", engine).observe(seconds)
        self.moved.labels("tiny", engine).observe(size)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def close_to(got: Figures | None, want: Figures) -> bool:
    """Figures alike but for a float's last digits (a p50 interpolated in its bucket, a percent made a fraction)."""
    return got is not None and astuple(got) == pytest.approx(astuple(want))


def busy_server(nixl: bool = False, bytes_kind: type[Histogram] | type[Summary] = Histogram) -> Server:
    """A server of two engines with requests running and waiting, and tokens already counted."""
    server = Server(nixl, bytes_kind)
    for engine, (running, waiting, usage) in {"0": (3, 1, 0.25), "1": (2, 0, 0.75)}.items():
        server.running.labels("tiny", engine).set(running)
        server.waiting.labels("tiny", engine).set(waiting)
        server.usage.labels("tiny", engine).set(usage)
    server.prompt.labels("tiny", "0").inc(4000)
    server.generated.labels("tiny", "0").inc(1000)
    return server


def test_figures_between_two_samples_sum_the_engines_and_rate_the_counters() -> None:
    server = busy_server()
    first = parse_metrics(server.text(), at=10.0)
    server.prompt.labels("tiny", "1").inc(2000)
    server.generated.labels("tiny", "0").inc(600)
    server.generated.labels("tiny", "1").inc(1000)
    second = parse_metrics(server.text(), at=12.0)
    assert figures_between(first, second, "decode") == Figures(generation_tps=800.0, running=5, queued=1,
                                                              token_usage=0.5), "KV usage: the engines' mean"
    assert figures_between(first, second, "prefill") == Figures(prompt_tps=1000.0, running=5, queued=1, token_usage=0.5)


def test_a_first_sample_gives_its_gauges_and_no_rate() -> None:
    server = busy_server()
    for seconds in (0.03, 0.04, 0.06):
        server.ttft.labels("tiny", "0").observe(seconds)
    figures = figures_between(None, parse_metrics(server.text(), at=5.0), "decode")
    assert close_to(figures, Figures(running=5, queued=1, token_usage=0.5, ttft_p50=0.05 * 1.5 / 2))
    assert figures.generation_tps is None and figures.kv_gbps is None and figures.kv_failed is None


def test_ttft_p50_covers_the_requests_since_the_last_sample() -> None:
    server = busy_server()
    server.ttft.labels("tiny", "0").observe(0.9)
    first = parse_metrics(server.text(), at=0.0)
    for engine, seconds in (("0", 0.3), ("1", 0.4), ("1", 0.45), ("0", 0.6)):
        server.ttft.labels("tiny", engine).observe(seconds)
    second = parse_metrics(server.text(), at=2.0)
    assert figures_between(first, second).ttft_p50 == pytest.approx(0.2 + 0.3 * (2 / 3))
    assert figures_between(second, parse_metrics(server.text(), at=4.0)).ttft_p50 is None, "no new request"


def test_the_nixl_series_give_the_kv_rate_and_failures_on_the_side_that_has_them() -> None:
    server = busy_server(nixl=True)
    first = parse_metrics(server.text(), at=0.0)
    server.transfer("0", 3 * 2**30)
    server.transfer("1", 1 * 2**30)
    server.failed.labels("tiny", "1").inc(2)
    second = parse_metrics(server.text(), at=2.0)
    decode = figures_between(first, second, "decode")      # pull mode: the decode reads the KV and records it
    assert (decode.kv_gbps, decode.kv_failed) == (pytest.approx(2.0), 2)
    assert figures_between(None, second, "prefill").kv_failed == 2


def test_a_router_gives_pd_requests_per_second_their_p50_and_the_workers_it_holds_out() -> None:
    first = parse_metrics(router_text(requests=7, durations=(0.3,), health=(1, 1), circuits=(0, 0)), at=0.0)
    second = parse_metrics(router_text(requests=13, durations=(0.3, 0.3, *[1.2] * 5), health=(1, 0),
                                       circuits=(1, 0)), at=2.0)
    assert close_to(router_figures_between(first, second),
                    Figures(requests_ps=3.0, latency_p50=1.0 + 1.5 * 2 / 5, open_circuits=2)), "one unhealthy, one open"
    assert close_to(router_figures_between(None, first),
                    Figures(latency_p50=0.25 + 0.25 * 0.5, open_circuits=0)), "a rate needs two samples"


def test_an_idle_router_whose_request_counter_is_not_exported_yet_routes_nothing() -> None:
    idle = router_text(requests=None, durations=(), health=(1, 1), circuits=())
    first, second = parse_metrics(idle, at=0.0), parse_metrics(idle, at=5.0)
    assert router_figures_between(first, second) == Figures(requests_ps=0.0, open_circuits=0)


def test_kv_totals_are_summed_over_two_engines() -> None:
    server = busy_server(nixl=True)
    server.transfer("0", 6 * MIB)
    server.transfer("0", 6 * MIB)
    server.transfer("1", 12 * MIB)
    server.failed.labels("tiny", "1").inc()
    assert kv_totals(server.text()) == KvTotals(transfers=3, megabytes=24.0, failed=1, side="decode")


def test_kv_totals_read_a_summary_of_the_bytes_as_well() -> None:
    server = busy_server(nixl=True, bytes_kind=Summary)
    server.transfer("0", 35 * MIB)
    server.transfer("1", 35 * MIB)
    assert kv_totals(server.text()) == KvTotals(transfers=2, megabytes=70.0, side="decode")


def test_a_transfer_seen_between_two_readings_moves_the_kv_check() -> None:
    server = busy_server(nixl=True)
    before = {"decode": kv_totals(server.text())}
    server.transfer("0", 35 * MIB)
    seen = kv_seen(before, {"decode": kv_totals(server.text())})
    assert seen.moved and not seen.failed and seen.words == "KV moved prefill→decode, 35 MB into decode"


def test_a_server_without_the_nixl_connector_says_it_exports_no_kv_series() -> None:
    assert kv_totals(busy_server().text()) == KvTotals(exported=False, side="decode")


def test_the_failed_transfers_counter_is_named_as_vllm_exports_it() -> None:
    server = busy_server(nixl=True)
    server.failed.labels("tiny", "0").inc()
    assert f"{TRANSFER_FAILED}_total{{" in server.text()


def test_a_stats_line_gives_its_throughputs_load_and_gpu_kv_usage() -> None:
    line = ("(APIServer pid=23252) INFO 12-05 06:55:10 [loggers.py:259] Engine 000: Avg prompt throughput: 1.8 tokens/s, "
            "Avg generation throughput: 1.6 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.3%, "
            "Prefix cache hit rate: 0.0%")
    assert batch_line(line)
    assert close_to(batch_figures(line), Figures(prompt_tps=1.8, generation_tps=1.6, running=1, queued=0,
                                                 token_usage=0.003))


def test_a_stats_line_on_cpu_says_kv_cache_usage_without_gpu() -> None:
    line = ("(APIServer pid=41) INFO 12-05 07:01:12 [loggers.py:259] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 12.5 tokens/s, Running: 4 reqs, Waiting: 2 reqs, KV cache usage: 12.5%, "
            "Prefix cache hit rate: 50.0%, External prefix cache hit rate: 100.0%")
    assert batch_figures(line) == Figures(prompt_tps=0.0, generation_tps=12.5, running=4, queued=2, token_usage=0.125)


def test_an_older_line_with_swapped_and_cpu_kv_usage_reads_the_gpu_usage() -> None:
    line = ("INFO 10-16 09:06:41 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 9.1 "
            "tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 1 reqs, GPU KV cache usage: 4.0%, "
            "CPU KV cache usage: 0.0%.")
    assert batch_figures(line) == Figures(prompt_tps=0.0, generation_tps=9.1, running=2, queued=1, token_usage=0.04)


def test_a_line_that_is_not_a_stats_line_has_no_figures() -> None:
    for line in ("(APIServer pid=23252) INFO:     127.0.0.1:40312 - \"POST /v1/completions HTTP/1.1\" 200 OK",
                 "(EngineCore_DP0 pid=23301) INFO 12-05 06:54:31 [gpu_model_runner.py:2653] Model loading took 0.1 GiB",
                 "KV Transfer metrics: Num successful transfers=1, Avg xfer time (ms)=3.2"):
        assert not batch_line(line)
        assert batch_figures(line) is None


@pytest.mark.parametrize("text", ["<html>not found</html>\n{", '{"detail": "Not Found"}'])
def test_text_that_is_not_metrics_raises(text: str) -> None:
    with pytest.raises((ValueError, KeyError)):
        parse_metrics(text, at=0.0)
    with pytest.raises((ValueError, KeyError)):
        kv_totals(text)


def test_a_malformed_family_pdtui_does_not_read_leaves_the_figures_whole() -> None:
    text = busy_server().text() + "# TYPE vllm:some_new_family gauge\nvllm:some_new_family{broken 1\n"
    assert figures_between(None, parse_metrics(text, at=0.0)).running == 5


ROUTER_BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5)
WORKERS = ("http://10.0.0.1:8100", "http://10.0.0.2:8200")


def router_text(requests: int | None, durations: tuple[float, ...], health: tuple[int, ...],
                circuits: tuple[int, ...]) -> str:
    """vllm-router's exposition (metrics-exporter-prometheus): labelled series appear only once first used."""
    lines = []
    if requests is not None:
        lines += ["# HELP vllm_router_pd_requests_total Total PD requests by route",
                  "# TYPE vllm_router_pd_requests_total counter",
                  f'vllm_router_pd_requests_total{{route="/v1/completions"}} {requests}',
                  "# TYPE vllm_router_processed_requests_total counter",
                  *(f'vllm_router_processed_requests_total{{worker="{w}"}} {requests}' for w in WORKERS)]
    if durations:
        route = 'route="/v1/completions"'
        lines += ["# HELP vllm_router_pd_request_duration_seconds PD request duration by route",
                  "# TYPE vllm_router_pd_request_duration_seconds histogram",
                  *(f'vllm_router_pd_request_duration_seconds_bucket{{{route},le="{le}"}} '
                    f"{sum(d <= le for d in durations)}" for le in ROUTER_BOUNDS),
                  f'vllm_router_pd_request_duration_seconds_bucket{{{route},le="+Inf"}} {len(durations)}',
                  f"vllm_router_pd_request_duration_seconds_sum{{{route}}} {sum(durations)}",
                  f"vllm_router_pd_request_duration_seconds_count{{{route}}} {len(durations)}"]
    lines += ["# HELP vllm_router_worker_health Worker health status (1=healthy, 0=unhealthy)",
              "# TYPE vllm_router_worker_health gauge",
              *(f'vllm_router_worker_health{{worker="{w}"}} {h}' for w, h in zip(WORKERS, health, strict=True))]
    if circuits:
        lines += ["# TYPE vllm_router_cb_state gauge",
                  *(f'vllm_router_cb_state{{worker="{w}"}} {c}' for w, c in zip(WORKERS, circuits, strict=True))]
    return "\n".join(lines) + "\n"
