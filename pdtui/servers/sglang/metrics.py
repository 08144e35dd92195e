"""A ready SGLang server's live figures: read from its ``/metrics``, or from its batch lines without it.

``/metrics`` (SGLang's ``--enable-metrics``) is Prometheus text, parsed with
prometheus_client's own parser. Gauges give running and queued requests, KV
token usage and decode's generation throughput; the time-to-first-token
histogram gives a p50 over the requests between two samples; the disaggregation
queues' gauges give the requests held for a KV transfer, each queue in the
words of the poll state SGLang's ``KVTransferError`` names when it times them
out (:func:`transfer_queues`). Without it, the
batch lines each scheduler logs still give the running and queued requests,
the KV usage and (decode) the generation throughput.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import replace

from prometheus_client.samples import Sample

from pdtui.servers.prometheus import MetricsSample, families, recent_quantile, summed
from pdtui.vocabulary.figures import Figures, KvTotals, TransferQueues, TransferStage

RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
TOKEN_USAGE = "sglang:token_usage"
GEN_THROUGHPUT = "sglang:gen_throughput"
PROMPT_TOKENS = "sglang:prompt_tokens"            # counters, named without their _total
GENERATION_TOKENS = "sglang:generation_tokens"
TTFT = "sglang:time_to_first_token_seconds"
# The KV transfer between a prefill and its decode (SGLang 0.5.x; the histograms per TP rank, on the prefill).
KV_TRANSFER_LATENCY = "sglang:kv_transfer_latency_ms"
KV_TRANSFER_MB = "sglang:kv_transfer_total_mb"
TRANSFER_FAILED = "sglang:num_transfer_failed_reqs"     # counters, named without their _total
BOOTSTRAP_FAILED = "sglang:num_bootstrap_failed_reqs"
EVERY_RANK = (KV_TRANSFER_MB, TRANSFER_FAILED)
REQUESTS = "sglang:num_requests"                         # requests finished (a counter, without its _total)
# The disaggregation queues a request waits in for its KV transfer (0.5.x gauges, the scheduler's): the gauge, the
# queue, and what a request there waits for, in the words of the poll state SGLang's KVTransferError names.
TRANSFER_QUEUES = (
    ("sglang:num_prefill_bootstrap_queue_reqs", "prefill bootstrap queue",
     "KVPoll.Bootstrapping: the handshake with its decode"),
    ("sglang:num_prefill_inflight_queue_reqs", "prefill inflight queue",
     "its KV sent, waiting for the decode to take it"),
    ("sglang:num_decode_prealloc_queue_reqs", "decode prealloc queue",
     "KVPoll.Bootstrapping: the handshake with its prefill"),
    ("sglang:num_decode_transfer_queue_reqs", "decode transfer queue",
     "KVPoll.WaitingForInput: waiting for the prefill's KV"),
)
TRANSFER_GAUGES = tuple(gauge for gauge, _, _ in TRANSFER_QUEUES)
KV_MB_SUM = f"{KV_TRANSFER_MB}_sum"
METRICS_FLAG = "--enable-metrics"
METRICS_HINT = f"TTFT needs {METRICS_FLAG}"
# The routers' own (smg and sglang-router 0.3 export the same smg_* names).
ROUTED = "smg_router_requests"
ROUTED_SECONDS = "smg_router_request_duration_seconds"
ACTIVE = "smg_worker_requests_active"
CIRCUIT_STATE = "smg_worker_cb_state"           # per worker: 0 closed, 1 open, 2 half open
OPEN_CIRCUITS = f"{CIRCUIT_STATE}:open"

# The families each reading takes its figures from: the rest of a server's text (a hundred families, most of it
# histogram buckets) is never handed to the parser, whose time goes with the text's length.
FIGURE_FAMILIES = (RUNNING, QUEUED, TOKEN_USAGE, GEN_THROUGHPUT, PROMPT_TOKENS, GENERATION_TOKENS, TTFT,
                   KV_TRANSFER_MB, TRANSFER_FAILED, REQUESTS, *TRANSFER_GAUGES, ROUTED, ROUTED_SECONDS, ACTIVE,
                   CIRCUIT_STATE)
KV_FAMILIES = (KV_TRANSFER_LATENCY, KV_TRANSFER_MB, TRANSFER_FAILED, BOOTSTRAP_FAILED)

# "Decode batch. #running-req: ..." (2025), "Decode batch, #running-req: ..." (0.5.23), with " [N]" after "batch"
# when SGLang logs its forward iterations.
_BATCH = re.compile(r"(Decode|Prefill) batch(?: \[\d+\])?[.,] (.*)")
_BATCH_HINTS = ("batch. #", "batch, #", "batch [")
_FIELD = re.compile(r"(#[\w-]+|token usage|gen throughput \(token/s\)): ([\d.]+)")


def parse_metrics(text: str, at: float) -> MetricsSample:
    """The figures pdtui reads from a server's Prometheus text (ValueError when it is not that).

    Each rank of a TP group reports the same scheduler, so rank 0's series stand for it; the KV transfer series
    are each rank's own share, so those are summed over every rank (a histogram's ``_sum`` kept as a value).
    """
    values: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    for family in families(text, FIGURE_FAMILIES):
        if family.name in EVERY_RANK:
            for sample in family.samples:
                if sample.name.endswith(("_sum", "_total")) and math.isfinite(sample.value):
                    key = f"{family.name}_sum" if sample.name.endswith("_sum") else family.name
                    values[key] = values.get(key, 0.0) + sample.value
            continue
        for sample in _first_rank(family.samples):
            if not math.isfinite(sample.value):
                continue        # NaN and infinities say nothing a panel can show
            if family.name == CIRCUIT_STATE:
                values[OPEN_CIRCUITS] = values.get(OPEN_CIRCUITS, 0.0) + (sample.value == 1)
            if family.type == "histogram" and sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                counts = buckets.setdefault(family.name, {})
                counts[le] = counts.get(le, 0.0) + sample.value
            elif family.type in ("gauge", "counter", "untyped") and not sample.name.endswith("_created"):
                values[family.name] = values.get(family.name, 0.0) + sample.value
    return MetricsSample(at, values, {name: tuple(sorted(counts.items())) for name, counts in buckets.items()})


def _first_rank(samples: Iterable[Sample]) -> Iterable[Sample]:
    """The series of tensor-parallel rank 0 (every rank may report the same scheduler), all data-parallel ones."""
    return (s for s in samples if s.labels.get("tp_rank", "0") == "0")


def figures_between(previous: MetricsSample | None, current: MetricsSample, role: str = "decode") -> Figures:
    """A prefill's or decode's figures at ``current``; rates and the TTFT p50 over the time since ``previous``.

    A decode's throughput is what it generates, a prefill's the prompt tokens it takes in (it generates none).
    """
    values = current.values
    seconds = current.at - previous.at if previous is not None else 0.0

    def rate(name: str) -> float | None:
        if previous is None or seconds <= 0 or name not in values or name not in previous.values:
            return None
        return max(0.0, values[name] - previous.values[name]) / seconds

    running, queued, generation = values.get(RUNNING), values.get(QUEUED), values.get(GEN_THROUGHPUT)
    queues = _queues(current)
    load = Figures(running=int(running) if running is not None else None,
                   queued=int(queued) if queued is not None else None, token_usage=values.get(TOKEN_USAGE),
                   ttft_p50=recent_quantile(0.5, previous, current, TTFT),
                   in_transfer=queues.requests if queues is not None else None)
    failed = values.get(TRANSFER_FAILED)
    if failed is not None or KV_MB_SUM in values:
        load = replace(load, kv_failed=int(failed or 0))
    if role == "prefill":
        sent = rate(KV_MB_SUM)
        return replace(load, prompt_tps=rate(PROMPT_TOKENS), kv_gbps=sent / 1024 if sent is not None else None)
    return replace(load, generation_tps=generation if generation is not None else rate(GENERATION_TOKENS))


def transfer_queues(text: str) -> TransferQueues | None:
    """The requests a server's text holds in its disaggregation queues, and what it has moved (its requests
    finished and, on a prefill, the KV it sent); None when it exports none of the queues' gauges (ValueError when
    the text is not Prometheus')."""
    return _queues(parse_metrics(text, 0.0))


def _queues(sample: MetricsSample) -> TransferQueues | None:
    values = sample.values
    stages = tuple(TransferStage(queue, waits_for, int(values[gauge])) for gauge, queue, waits_for in TRANSFER_QUEUES
                   if gauge in values)
    if not stages:
        return None
    return TransferQueues(stages, values.get(REQUESTS, 0.0) + values.get(KV_MB_SUM, 0.0))


def router_figures_between(previous: MetricsSample | None, current: MetricsSample) -> Figures:
    """A router's figures at ``current``: requests per second and their p50 since ``previous``, in flight, open
    circuits."""
    values = current.values
    seconds = current.at - previous.at if previous is not None else 0.0
    routed = None
    if previous is not None and seconds > 0 and ROUTED in previous.values:
        routed = max(0.0, values.get(ROUTED, 0.0) - previous.values[ROUTED]) / seconds
    active = values.get(ACTIVE)
    circuits = values.get(OPEN_CIRCUITS)
    return Figures(running=int(active) if active is not None else None, requests_ps=routed,
                   latency_p50=recent_quantile(0.5, previous, current, ROUTED_SECONDS),
                   open_circuits=int(circuits) if circuits is not None else None)


def batch_line(message: str) -> bool:
    """Whether a line may be a scheduler's batch line (cheap: every serving line is asked)."""
    return any(hint in message for hint in _BATCH_HINTS)


def batch_figures(message: str) -> Figures | None:
    """The figures of one scheduler batch line (``Decode batch, #running-req: 12, ...``), None for other lines."""
    found = _BATCH.search(message)
    if found is None:
        return None
    fields = dict(_FIELD.findall(found[2]))
    try:
        throughput = fields.get("gen throughput (token/s)")
        return Figures(
            generation_tps=float(throughput) if throughput is not None else None,
            running=int(fields["#running-req"]) if "#running-req" in fields else None,
            queued=int(fields["#queue-req"]) if "#queue-req" in fields else None,
            token_usage=float(fields["token usage"]) if "token usage" in fields else None,
        )
    except ValueError:
        return None


_WANTED = {f"{KV_TRANSFER_LATENCY}_count": "transfers", f"{KV_TRANSFER_MB}_sum": "megabytes",
           f"{TRANSFER_FAILED}_total": "failed", f"{BOOTSTRAP_FAILED}_total": "bootstrap_failed"}


def kv_totals(text: str) -> KvTotals:
    """The KV transfer totals in a server's Prometheus text, zero where a series is absent (ValueError when the
    text is not Prometheus')."""
    sums = summed(text, KV_FAMILIES, _WANTED)
    if not sums:
        return KvTotals(exported=False)
    return KvTotals(sums.get("transfers", 0.0), sums.get("megabytes", 0.0), sums.get("failed", 0.0),
                    sums.get("bootstrap_failed", 0.0))
