"""Prometheus text as the serving engines' metrics modules read it: the families asked for, parsed by
prometheus_client; one reading kept as a sample; a histogram's quantile over the observations between two.
Engine-neutral: each engine's module (servers/*/metrics.py) names its own series."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """One reading of ``/metrics``: each gauge and counter summed over its series, each histogram's buckets."""

    at: float                                            # the engine's clock when it was read
    values: Mapping[str, float] = field(default_factory=dict)
    buckets: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)   # (le, cumulative)


def families(text: str, names: tuple[str, ...]) -> Iterable[Metric]:
    """The families ``names`` (and any whose name begins with one of them) of a Prometheus text, parsed by
    prometheus_client: their samples with their ``# HELP`` and ``# TYPE`` lines, the other lines left out (1.2 ms
    for a prefill's whole text, 0.1 ms for its KV series). A text with none of those lines is parsed whole, so that
    one that is not Prometheus' still raises ValueError."""
    heads = tuple(f"# {kind} {name}" for kind in ("HELP", "TYPE") for name in names)
    kept = [line for line in text.splitlines() if line.startswith(names) or line.startswith(heads)]
    return text_string_to_metric_families("\n".join(kept) + "\n" if kept else text)


def recent_quantile(q: float, previous: MetricsSample | None, current: MetricsSample, name: str) -> float | None:
    """The ``q`` quantile of the observations made between the two samples (all of them without a previous)."""
    now = current.buckets.get(name)
    if not now:
        return None
    before = dict(previous.buckets.get(name, ())) if previous is not None else {}
    return histogram_quantile(q, [(le, count - before.get(le, 0.0)) for le, count in now])


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of cumulative ``(le, count)`` buckets, interpolated inside its bucket as Prometheus'
    ``histogram_quantile`` does; None with no observation. A quantile in the ``+Inf`` bucket is the highest
    finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower_bound
            inside = count - lower_count
            return lower_bound + (le - lower_bound) * ((rank - lower_count) / inside if inside else 1.0)
        lower_bound, lower_count = le, count
    return lower_bound


def summed(text: str, names: tuple[str, ...], wanted: Mapping[str, str]) -> dict[str, float]:
    """The samples of ``names``' families whose name ``wanted`` maps, summed under what it maps them to over every
    series (finite values only); empty when none is there."""
    sums: dict[str, float] = {}
    for family in families(text, names):
        for sample in family.samples:
            total = wanted.get(sample.name)
            if total is not None and math.isfinite(sample.value):
                sums[total] = sums.get(total, 0.0) + sample.value
    return sums
