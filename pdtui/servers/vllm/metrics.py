"""A ready vLLM server's live figures: read from its ``/metrics``, or from its periodic stats lines without it.

vLLM serves ``/metrics`` on its API port by default (Prometheus text, parsed
with prometheus_client's own parser, as SGLang's is). Every series carries an
``engine`` label (one per data-parallel engine, each its own scheduler), so
each is summed over its engines, the KV cache usage averaged. Running and
waiting requests and the KV cache usage are gauges; the prompt and generation
rates come from their counters between two samples; the time-to-first-token
histogram gives a p50 over the requests between them. Without ``/metrics``, the
stats line each engine logs every few seconds (``Engine 000: Avg prompt
throughput: ...``) gives the same gauges and both throughputs.

The KV transfer series (``vllm:nixl_*``) exist only when the server runs the
NixlConnector (``--kv-transfer-config '{"kv_connector":"NixlConnector",...}'``):
then each engine's are exported from start-up, at zero. Which side exports them: a transfer is recorded by
the worker that completes it. In NIXL's default pull mode that is the DECODE,
which reads each request's KV from its prefill (``vllm:nixl_xfer_time_seconds``,
``vllm:nixl_bytes_transferred``, ``vllm:nixl_num_descriptors`` and
``vllm:nixl_num_failed_transfers`` on the decode); the prefill counts only the
requests whose KV expired before any decode read it
(``vllm:nixl_num_kv_expired_reqs``). Later vLLM releases add a push mode in
which the prefill writes and so records the transfers itself. So nothing here
assumes a side: :func:`kv_totals` and the figures read whichever server's text
they are given, and a server without the series says so. A decode's requests
waiting for their KV are the gauge ``vllm:num_requests_kv_fetch_by_stage``
(0.32, by ``stage``): those waiting to start their fetch and those fetching
are in transfer; ``completed_waiting`` ones have their KV and wait to run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace

from prometheus_client.metrics_core import Metric

from pdtui.servers.prometheus import MetricsSample, families, recent_quantile, summed
from pdtui.vocabulary.figures import Figures, KvTotals, TransferQueues, TransferStage

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"                 # 0..1, per engine: averaged, not summed
PROMPT_TOKENS = "vllm:prompt_tokens"                  # counters, named without their _total
GENERATION_TOKENS = "vllm:generation_tokens"
TTFT = "vllm:time_to_first_token_seconds"
# The NixlConnector's KV transfer series (histograms, per engine; on the side that completes a transfer).
NIXL_XFER_TIME = "vllm:nixl_xfer_time_seconds"
NIXL_BYTES = "vllm:nixl_bytes_transferred"            # its _sum is bytes, its _count the transfers
TRANSFER_FAILED = "vllm:nixl_num_failed_transfers"    # a counter, named without its _total
NIXL_BYTES_SUM = f"{NIXL_BYTES}_sum"
NIXL_TRANSFERS = f"{NIXL_BYTES}_count"
SUCCEEDED = "vllm:request_success"                    # requests finished (a counter, without its _total)
KV_FETCH = "vllm:num_requests_kv_fetch_by_stage"     # a decode's requests fetching their KV, by stage
# The stages of a KV fetch that hold a request in transfer: the stage label, and what a request there waits for.
TRANSFER_STAGES = (("waiting_to_start", "its KV fetch from the prefill not started"),
                   ("in_progress", "its KV being read from the prefill"))
METRICS_HINT = "TTFT needs /metrics (on by default), KV transfers the NixlConnector"
# vllm-router's own.
PD_REQUESTS = "vllm_router_pd_requests"               # counters, named without their _total
PROCESSED = "vllm_router_processed_requests"          # per worker: the routed count when it runs without PD
PD_SECONDS = "vllm_router_pd_request_duration_seconds"
ROUTER_RUNNING = "vllm_router_running_requests"       # per worker, where its policy keeps it
WORKER_HEALTH = "vllm_router_worker_health"           # per worker: 1 healthy, 0 not
CIRCUIT_STATE = "vllm_router_cb_state"                # per worker: 0 closed, 1 open, 2 half open
HELD_OUT = "vllm_router:held_out"                     # workers unhealthy or with their circuit open

SERVER_FAMILIES = (RUNNING, WAITING, KV_USAGE, PROMPT_TOKENS, GENERATION_TOKENS, TTFT, NIXL_BYTES, TRANSFER_FAILED,
                   SUCCEEDED, KV_FETCH)
ROUTER_FAMILIES = (PD_REQUESTS, PROCESSED, PD_SECONDS, ROUTER_RUNNING, WORKER_HEALTH, CIRCUIT_STATE)
# The families a reading takes its figures from: the rest of a server's text (most of it histogram buckets) is
# never handed to the parser, whose time goes with the text's length.
FIGURE_FAMILIES = SERVER_FAMILIES + ROUTER_FAMILIES
KV_FAMILIES = (NIXL_XFER_TIME, NIXL_BYTES, TRANSFER_FAILED)
_AVERAGED = frozenset({KV_USAGE})
_WORKER_STATES = frozenset({WORKER_HEALTH, CIRCUIT_STATE})

# "(APIServer pid=1) INFO 12-05 06:55:10 [loggers.py:259] Engine 000: Avg prompt throughput: 1.8 tokens/s, ..."
# Each field opens the line's list or follows ", " so "CPU KV cache usage" (0.x's swap space) is not the GPU's.
_BATCH_HINT = "Avg prompt throughput: "
_FIELD = re.compile(r"(?:^|, )(Avg prompt throughput|Avg generation throughput|Running|Waiting|Pending"
                    r"|(?:GPU )?KV cache usage): ([\d.]+)")


def parse_metrics(text: str, at: float) -> MetricsSample:
    """The figures pdtui reads from a server's or vllm-router's Prometheus text (ValueError when it is not that)."""
    values: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    held_out: set[str] | None = None
    for family in families(text, FIGURE_FAMILIES):
        name = _base_name(family)
        if name in _WORKER_STATES:
            held_out = (held_out or set()) | _held_out(family)
        elif name == KV_FETCH:
            _read_stages(family, values)
        elif name in FIGURE_FAMILIES and family.type in ("histogram", "summary"):
            _read_histogram(name, family, values, buckets.setdefault(name, {}))
        elif name in FIGURE_FAMILIES:
            _read_value(name, family, values)
    if held_out is not None:
        values[HELD_OUT] = float(len(held_out))
    return MetricsSample(at, values, {name: tuple(sorted(counts.items())) for name, counts in buckets.items() if counts})


def _base_name(family: Metric) -> str:
    """A family's name as a typed one has it: a counter exported without its ``# TYPE`` line keeps its ``_total``."""
    if family.type in ("unknown", "untyped") and family.name.endswith("_total"):
        return family.name.removesuffix("_total")
    return family.name


def _read_value(name: str, family: Metric, values: dict[str, float]) -> None:
    """A gauge's or counter's value over its engines: summed, or averaged for a fraction such as the KV usage."""
    found = [s.value for s in family.samples if not s.name.endswith("_created") and math.isfinite(s.value)]
    if found:
        values[name] = sum(found) / len(found) if name in _AVERAGED else sum(found)


def _read_stages(family: Metric, values: dict[str, float]) -> None:
    """A gauge by ``stage``, each stage summed over its engines under ``NAME:STAGE``."""
    for sample in family.samples:
        if math.isfinite(sample.value):
            key = f"{KV_FETCH}:{sample.labels.get('stage', '')}"
            values[key] = values.get(key, 0.0) + sample.value


def _read_histogram(name: str, family: Metric, values: dict[str, float], counts: dict[float, float]) -> None:
    """A histogram's (or summary's) cumulative buckets and its ``_sum`` and ``_count``, summed over its engines."""
    for sample in family.samples:
        if not math.isfinite(sample.value):
            continue        # NaN and infinities say nothing a panel can show
        if sample.name.endswith("_bucket"):
            le = float(sample.labels["le"])
            counts[le] = counts.get(le, 0.0) + sample.value
        elif sample.name.endswith(("_sum", "_count")):
            key = f"{name}_{sample.name.rsplit('_', 1)[1]}"
            values[key] = values.get(key, 0.0) + sample.value


def _held_out(family: Metric) -> set[str]:
    """The workers a router holds out by one of its per-worker gauges: those not healthy, or whose circuit is
    open."""
    out = 1.0 if _base_name(family) == CIRCUIT_STATE else 0.0
    return {s.labels.get("worker", "") for s in family.samples if s.value == out}


def figures_between(previous: MetricsSample | None, current: MetricsSample, role: str = "decode") -> Figures:
    """A prefill's or decode's figures at ``current``; rates and the TTFT p50 over the time since ``previous``.

    A decode's throughput is what it generates, a prefill's the prompt tokens it takes in (it generates one token
    a request). The KV rate is the NIXL bytes whichever side's text has them: the decode's in pull mode.
    """
    values = current.values
    running, waiting = values.get(RUNNING), values.get(WAITING)
    queues = _queues(current)
    load = Figures(running=int(running) if running is not None else None,
                   queued=int(waiting) if waiting is not None else None, token_usage=values.get(KV_USAGE),
                   ttft_p50=recent_quantile(0.5, previous, current, TTFT),
                   in_transfer=queues.requests if queues is not None else None)
    if TRANSFER_FAILED in values or NIXL_BYTES_SUM in values:
        moved = _rate(previous, current, NIXL_BYTES_SUM, absent_is_zero=True)
        load = replace(load, kv_failed=int(values.get(TRANSFER_FAILED, 0.0)),
                       kv_gbps=moved / 2**30 if moved is not None else None)
    if role == "prefill":
        return replace(load, prompt_tps=_rate(previous, current, PROMPT_TOKENS))
    return replace(load, generation_tps=_rate(previous, current, GENERATION_TOKENS))


def transfer_queues(text: str) -> TransferQueues | None:
    """A decode's requests in KV transfer by stage, and what it has moved (its NIXL transfers and its requests
    finished); None when its text has no such gauge (ValueError when the text is not Prometheus')."""
    return _queues(parse_metrics(text, 0.0))


def _queues(sample: MetricsSample) -> TransferQueues | None:
    values = sample.values
    stages = tuple(TransferStage(f"KV fetch {stage.replace('_', ' ')}", waits_for, int(values[f"{KV_FETCH}:{stage}"]))
                   for stage, waits_for in TRANSFER_STAGES if f"{KV_FETCH}:{stage}" in values)
    if not stages:
        return None
    return TransferQueues(stages, values.get(NIXL_TRANSFERS, 0.0) + values.get(SUCCEEDED, 0.0))


def router_figures_between(previous: MetricsSample | None, current: MetricsSample) -> Figures:
    """vllm-router's figures at ``current``: PD requests per second and their p50 since ``previous``, in flight
    (where it counts them), and the workers it holds out (unhealthy or circuit open) as open circuits."""
    routed = PD_REQUESTS if PD_REQUESTS in current.values else PROCESSED
    running, held_out = current.values.get(ROUTER_RUNNING), current.values.get(HELD_OUT)
    return Figures(running=int(running) if running is not None else None,
                   requests_ps=_rate(previous, current, routed, absent_is_zero=True),
                   latency_p50=recent_quantile(0.5, previous, current, PD_SECONDS),
                   open_circuits=int(held_out) if held_out is not None else None)


def _rate(previous: MetricsSample | None, current: MetricsSample, name: str,
          absent_is_zero: bool = False) -> float | None:
    """A counter's rise per second between two samples (never negative: a restart resets it); None without a
    previous sample or without the counter in both (``absent_is_zero``: a labelled counter, exported only from its
    first use, is 0 before it)."""
    seconds = current.at - previous.at if previous is not None else 0.0
    if previous is None or seconds <= 0:
        return None
    if not absent_is_zero and (name not in current.values or name not in previous.values):
        return None
    return max(0.0, current.values.get(name, 0.0) - previous.values.get(name, 0.0)) / seconds


def batch_line(message: str) -> bool:
    """Whether a line may be an engine's periodic stats line (cheap: every serving line is asked)."""
    return _BATCH_HINT in message


def batch_figures(message: str) -> Figures | None:
    """The figures of one engine's stats line (``Engine 000: Avg prompt throughput: 1.8 tokens/s, ...``), None for
    other lines. It prints both throughputs whatever the server's role: both are kept, as the line says them."""
    start = message.find(_BATCH_HINT)
    if start < 0:
        return None
    fields = dict(_FIELD.findall(message[start:]))
    try:
        return Figures(prompt_tps=_number(fields, "Avg prompt throughput"),
                       generation_tps=_number(fields, "Avg generation throughput"),
                       running=_count(fields, "Running"), queued=_count(fields, "Waiting", "Pending"),
                       token_usage=_percent(fields, "GPU KV cache usage", "KV cache usage"))
    except ValueError:
        return None


def _number(fields: Mapping[str, str], *names: str) -> float | None:
    return next((float(fields[name]) for name in names if name in fields), None)


def _count(fields: Mapping[str, str], *names: str) -> int | None:
    number = _number(fields, *names)
    return int(number) if number is not None else None


def _percent(fields: Mapping[str, str], *names: str) -> float | None:
    """A usage the line prints in percent, as the 0..1 fraction Figures holds."""
    number = _number(fields, *names)
    return number / 100 if number is not None else None


_WANTED = {f"{NIXL_XFER_TIME}_count": "timed", f"{NIXL_BYTES}_count": "transfers", NIXL_BYTES_SUM: "bytes",
           f"{TRANSFER_FAILED}_total": "failed"}


def kv_totals(text: str) -> KvTotals:
    """The NIXL KV transfer totals in a server's Prometheus text, summed over its engines, zero where a series is
    absent (ValueError when the text is not Prometheus'). Transfers are the bytes histogram's count (the transfer
    time's where a release lacks it); failed, the transfers NIXL reported failed."""
    sums = summed(text, KV_FAMILIES, _WANTED)
    if not sums:
        return KvTotals(exported=False, side="decode")
    return KvTotals(transfers=sums.get("transfers", sums.get("timed", 0.0)),
                    megabytes=sums.get("bytes", 0.0) / 2**20, failed=sums.get("failed", 0.0), side="decode")
