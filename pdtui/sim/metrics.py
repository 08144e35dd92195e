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

from pdtui.sim.serving import KV_MB_PER_TOKEN, MAX_TOTAL_TOKENS, TRANSFER_RATE, Finished, Load, Serving

disable_created_metrics()   # SGLang's registry is multiprocess: its counters and histograms have no _created series

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
INTER_TOKEN = "sglang:inter_token_latency_seconds"
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
KV_LATENCY_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
KV_MB_BUCKETS = (1, 5, 10, 50, 100, 500, 1000, 5000, 10000)
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
    ("sglang:num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue.",
     "prefill_bootstrap"),
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

    def __init__(self, serving: Serving, model: str, inter_token: str = INTER_TOKEN, *, kv_series: bool = False,
                 tp_size: int = 1) -> None:
        """``inter_token``: the inter-token histogram's name in the generation played (see sim/wording.py);
        ``kv_series``: whether that generation exports the KV transfer series (each TP rank its own)."""
        self.registry = CollectorRegistry()
        scheduler = {"model_name": model, "engine_type": serving.role, "tp_rank": "0", "pp_rank": "0",
                     "moe_ep_rank": "0"}
        self.registry.register(SchedulerGauges(serving, scheduler))
        self.kv = KvTransferSeries(self.registry, scheduler, tp_size) if kv_series else None
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
        """Observe a request that left the server, as SGLang's tokenizer manager does (and a prefill's scheduler
        the transfer of its KV to the decode)."""
        if self.kv is not None and self.kv.role == "prefill" and done.time_to_first_token is not None:
            self.kv.transferred(done.prompt)
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

    def transfer_failed(self) -> None:
        """A request whose KV transfer failed (either side counts it)."""
        if self.kv is not None:
            self.kv.failed()

    def render(self) -> bytes:
        """The Prometheus text exposition (version 0.0.4)."""
        return generate_latest(self.registry)


class KvTransferSeries:
    """SGLang 0.5's KV transfer series, one set per TP rank: a prefill observes each transfer it completes (every
    rank sends its share of the heads; a decode has no such series, as a real 0.5.23's has none), either side
    counts the requests whose transfer failed."""

    def __init__(self, registry: CollectorRegistry, scheduler: dict[str, str], tp_size: int) -> None:
        self.role = scheduler["engine_type"]
        self.ranks = [{**scheduler, "tp_rank": str(rank)} for rank in range(max(1, tp_size))]
        names = list(scheduler)
        self._latency = self._size = None
        if self.role == "prefill":
            self._latency = Histogram("sglang:kv_transfer_latency_ms", "Histogram of KV cache transfer latency in ms.",
                                      names, registry=registry, buckets=KV_LATENCY_BUCKETS)
            self._size = Histogram("sglang:kv_transfer_total_mb", "Histogram of KV cache transfer size in MB.", names,
                                   registry=registry, buckets=KV_MB_BUCKETS)
        self._registry, self._names = registry, names
        self._failed: Counter | None = None

    def failed(self) -> None:
        """A request whose transfer failed. SGLang's series (multiprocess mode) appears at its first sample: not
        even its HELP line before, as a real 0.5.23 serves its /metrics."""
        if self._failed is None:
            self._failed = Counter("sglang:num_transfer_failed_reqs", "The number of transfer failed requests.",
                                   self._names, registry=self._registry)
        self._failed.labels(**self.ranks[0]).inc()

    def transferred(self, prompt_tokens: int) -> None:
        assert self._latency is not None and self._size is not None, "a prefill's series"
        share = prompt_tokens * KV_MB_PER_TOKEN / len(self.ranks)
        for labels in self.ranks:
            self._latency.labels(**labels).observe(prompt_tokens / TRANSFER_RATE * 1000)
            self._size.labels(**labels).observe(share)
