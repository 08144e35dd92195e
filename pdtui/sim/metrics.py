"""A sim worker's ``/metrics`` (``--enable-metrics``): SGLang's Prometheus series, from its load.

As SGLang serves them: the scheduler's gauges carry ``model_name``,
``engine_type``, ``tp_rank``, ``pp_rank`` and ``moe_ep_rank`` (rank 0 alone
reports); the tokenizer's counters and histograms carry ``model_name``, with
SGLang's own buckets. The gauges are read from :class:`pdtui.sim.serving.Serving`
when scraped; the counters and histograms are fed by each finished request.
Imported only with ``--enable-metrics``: prometheus_client is the one package
outside the stdlib the sim worker uses.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pdtui.sim.serving import MAX_TOTAL_TOKENS, Finished, Load, Serving

disable_created_metrics()   # SGLang's registry is multiprocess: its counters and histograms have no _created series

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
INTER_TOKEN = "sglang:inter_token_latency_seconds"
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
INTER_TOKEN_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                       0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)

# The scheduler's gauges: name, help (SGLang's), and how to read it from a Load.
GAUGES: tuple[tuple[str, str, str], ...] = (
    ("sglang:num_running_reqs", "The number of running requests.", "running"),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "queued"),
    ("sglang:num_used_tokens", "The number of used tokens.", "used_tokens"),
    ("sglang:token_usage", "The token usage.", "token_usage"),
    ("sglang:gen_throughput", "The generation throughput (token/s).", "gen_throughput"),
    ("sglang:cache_hit_rate", "The prefix cache hit rate.", "cache_hit_rate"),
    ("sglang:utilization", "The utilization.", "utilization"),
    ("sglang:num_prefill_prealloc_queue_reqs", "The number of requests in the prefill prealloc queue.",
     "prefill_prealloc"),
    ("sglang:num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue.",
     "prefill_inflight"),
    ("sglang:num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue.", "decode_prealloc"),
    ("sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue.", "decode_transfer"),
)


class SchedulerGauges(Collector):
    """The scheduler's gauges, read from the load at each scrape (SGLang sets them at each batch)."""

    def __init__(self, serving: Serving, labels: dict[str, str]) -> None:
        self.serving = serving
        self.labels = labels

    def collect(self) -> Iterator[Metric]:
        load: Load = self.serving.snapshot()
        names, values = list(self.labels), list(self.labels.values())
        for name, documentation, field in GAUGES:
            family = GaugeMetricFamily(name, documentation, labels=names)
            family.add_metric(values, float(getattr(load, field)))
            yield family
        total = GaugeMetricFamily("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
                                  labels=names)
        total.add_metric(values, float(MAX_TOTAL_TOKENS))
        yield total


class Metrics:
    """One worker's registry, what ``GET /metrics`` renders; it observes every request ``serving`` finishes."""

    def __init__(self, serving: Serving, model: str, inter_token: str = INTER_TOKEN) -> None:
        """``inter_token``: the inter-token histogram's name in the generation played (see sim/wording.py)."""
        self.registry = CollectorRegistry()
        scheduler = {"model_name": model, "engine_type": serving.role, "tp_rank": "0", "pp_rank": "0",
                     "moe_ep_rank": "0"}
        self.registry.register(SchedulerGauges(serving, scheduler))
        labels, registry = ["model_name"], self.registry
        self.prompt_tokens = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", labels,
                                     registry=registry).labels(model)
        self.generation_tokens = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                                         labels, registry=registry).labels(model)
        self.cached_tokens = Counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", labels,
                                     registry=registry).labels(model)
        self.requests = Counter("sglang:num_requests_total", "Number of requests processed.", labels,
                                registry=registry).labels(model)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, registry=registry, buckets=TTFT_BUCKETS).labels(model)
        self.inter_token = Histogram(inter_token, "Histogram of inter-token latency in seconds.", labels,
                                     registry=registry, buckets=INTER_TOKEN_BUCKETS).labels(model)
        self.e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                             labels, registry=registry, buckets=E2E_BUCKETS).labels(model)
        serving.observe = self.finished

    def finished(self, done: Finished) -> None:
        """Observe a request that left the server, as SGLang's tokenizer manager does."""
        self.prompt_tokens.inc(done.prompt)
        self.generation_tokens.inc(done.generated)
        if done.cached:
            self.cached_tokens.inc(done.cached)
        self.requests.inc()
        self.e2e.observe(done.e2e)
        if done.time_to_first_token is not None:
            self.ttft.observe(done.time_to_first_token)
        for _ in range(done.generated - 1):
            self.inter_token.observe(done.inter_token)

    def render(self) -> bytes:
        """The Prometheus text exposition (version 0.0.4)."""
        return generate_latest(self.registry)
