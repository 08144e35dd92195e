"""The sim worker's Prometheus registry: SGLang's names and labels, values from its load, parseable text."""

from __future__ import annotations

import random

from prometheus_client.parser import text_string_to_metric_families

from pdtui.sim.metrics import GAUGES, Metrics
from pdtui.sim.serving import Serving

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
COUNTERS = ("sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total")
HISTOGRAMS = ("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
              "sglang:e2e_request_latency_seconds")


def samples(metrics: Metrics) -> dict[str, tuple[dict[str, str], float]]:
    """Sample name -> (labels, value); a histogram by its _count and _sum."""
    text = metrics.render().decode()
    return {s.name: (s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
            if not s.name.endswith("_bucket")}


def test_every_series_is_there_with_its_model_before_any_request():
    got = samples(Metrics(Serving("decode"), MODEL))
    names = [*(name for name, _, _ in GAUGES), *COUNTERS, *(f"{h}_count" for h in HISTOGRAMS)]
    assert all(got[name][0]["model_name"] == MODEL for name in names), sorted(got)
    assert all(got[name][1] == 0 for name in names)
    assert got["sglang:num_running_reqs"][0]["tp_rank"] == "0"
    assert got["sglang:num_running_reqs"][0]["engine_type"] == "decode"


def test_the_gauges_read_the_load_and_a_finished_request_feeds_the_counters_and_histograms():
    serving = Serving("decode", rng=random.Random(1))
    metrics = Metrics(serving, MODEL)
    running = serving.arrive(prompt=200, max_tokens=32)
    serving.try_start(running)
    got = samples(metrics)
    assert got["sglang:num_running_reqs"][1] == 1 and got["sglang:num_used_tokens"][1] == 200
    done = serving.arrive(prompt=30, max_tokens=0)
    serving.try_start(done)
    serving.finish(done)
    got = samples(metrics)
    assert got["sglang:prompt_tokens_total"][1] == 30 and got["sglang:num_requests_total"][1] == 1
    assert got["sglang:e2e_request_latency_seconds_count"][1] == 1


def test_the_older_generation_names_its_inter_token_histogram_as_it_did():
    got = samples(Metrics(Serving("prefill"), MODEL, "sglang:time_per_output_token_seconds"))
    assert "sglang:time_per_output_token_seconds_count" in got and "sglang:inter_token_latency_seconds_count" not in got
    assert got["sglang:utilization"][1] == -1
