"""The sim worker under load: /metrics (with --enable-metrics only) and its batch lines follow the requests it serves."""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest_sim import Procs, fetch, free_port, read_until, wait_until, worker_process_argv  # noqa: F401

MODEL = "m/x"
GAUGES = ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage", "gen_throughput", "cache_hit_rate",
          "utilization", "num_prefill_bootstrap_queue_reqs", "num_prefill_inflight_queue_reqs",
          "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs")
COUNTERS = ("prompt_tokens_total", "generation_tokens_total", "num_requests_total")
HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds")
SYSTEM = "You are a terse assistant who answers in one line."
PROMPT = len(SYSTEM.split()) + 40      # the tokens of chat()'s prompt, a word each
ROUTED = {"bootstrap_host": "127.0.0.1", "bootstrap_port": 8998}


def ready_worker(procs: Procs, role: str, *extra: str) -> tuple[object, str]:
    port = free_port()
    worker = procs.start(worker_process_argv(role, port, "--model", MODEL, *extra, startup=0.2))
    read_until(worker, "fired up and ready")
    return worker, f"http://127.0.0.1:{port}"


def scrape(url: str) -> dict[str, float]:
    """Sample name -> value of the worker's /metrics (each name's one series; no buckets)."""
    code, body = fetch(url + "/metrics")
    assert code == 200, body
    families = text_string_to_metric_families(body.decode())
    return {s.name: s.value for family in families for s in family.samples if not s.name.endswith("_bucket")}


def chat(max_tokens: int, words: int = 40, **extra: object) -> dict[str, object]:
    return {"model": MODEL, "max_tokens": max_tokens, **extra,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "why " * words}]}


def in_flight(url: str, bodies: list[dict[str, object]]) -> list[threading.Thread]:
    """Send each body from a thread of its own; the threads, started."""
    threads = [threading.Thread(target=fetch, args=(url + "/v1/chat/completions", "POST", body, 30.0))
               for body in bodies]
    for thread in threads:
        thread.start()
    return threads


def joined(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(30)


def batch_lines(worker, kind: str) -> Iterator[str]:
    while True:
        yield read_until(worker, f"{kind} batch,")[-1]


def figure(line: str, name: str) -> float:
    match = re.search(rf"{re.escape(name)}: ([\d.]+)", line)
    assert match, line
    return float(match.group(1))


def test_without_enable_metrics_there_is_no_metrics_endpoint(procs: Procs):
    _, url = ready_worker(procs, "decode")
    code, body = fetch(url + "/metrics")
    assert (code, json.loads(body)) == (404, {"detail": "Not Found"})


def test_with_enable_metrics_every_series_is_served_as_prometheus_text_with_its_model(procs: Procs):
    _, url = ready_worker(procs, "decode", "--enable-metrics")
    conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=10)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    assert response.status == 200 and response.getheader("Content-Type", "").startswith("text/plain; version=0.0.4")
    labels = {s.name: s.labels for family in text_string_to_metric_families(text) for s in family.samples}
    names = [*GAUGES, *COUNTERS, *(f"{h}_{part}" for h in HISTOGRAMS for part in ("count", "sum"))]
    for name in names:
        assert labels[f"sglang:{name}"]["model_name"] == MODEL, name
    assert labels["sglang:num_running_reqs"]["tp_rank"] == "0"


def test_the_older_generation_serves_its_own_inter_token_histogram(procs: Procs):
    _, url = ready_worker(procs, "decode", "--enable-metrics", "--generation", "older")
    got = scrape(url)
    assert "sglang:time_per_output_token_seconds_count" in got and "sglang:inter_token_latency_seconds_count" not in got


def test_under_load_the_decode_reports_running_requests_throughput_and_counts_them(procs: Procs):
    _, url = ready_worker(procs, "decode", "--enable-metrics", "--max-running-requests", "2")
    before = scrape(url)
    threads = in_flight(url, [chat(64) for _ in range(3)])
    busy = wait_until(lambda: (m := scrape(url))["sglang:num_running_reqs"] > 0 and m["sglang:gen_throughput"] > 0
                      and m["sglang:num_queue_reqs"] > 0 and m)
    assert busy["sglang:num_running_reqs"] == 2 and busy["sglang:num_used_tokens"] > 0
    assert busy["sglang:utilization"] == 1.0
    joined(threads)
    after = scrape(url)
    assert after["sglang:num_requests_total"] - before["sglang:num_requests_total"] == 3
    assert after["sglang:generation_tokens_total"] - before["sglang:generation_tokens_total"] == 3 * 64
    assert after["sglang:prompt_tokens_total"] - before["sglang:prompt_tokens_total"] == 3 * PROMPT
    assert after["sglang:time_to_first_token_seconds_count"] == 3
    assert after["sglang:inter_token_latency_seconds_count"] == 3 * 63
    assert after["sglang:num_running_reqs"] == 0 and after["sglang:num_queue_reqs"] == 0


def test_a_stream_is_still_running_after_its_first_event(procs: Procs):
    _, url = ready_worker(procs, "decode", "--enable-metrics")
    conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(chat(96, stream=True)),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        first = response.readline()
        assert first.startswith(b"data: ") and json.loads(first[6:])["choices"][0]["delta"]["content"] == "The"
        assert scrape(url)["sglang:num_running_reqs"] == 1
        rest = response.read().decode()
    finally:
        conn.close()
    events = [e.removeprefix("data: ") for e in rest.split("\n\n") if e.strip()]
    assert events[-1] == "[DONE]" and len(events) == 96 + 1   # 95 more tokens, the finish, [DONE]
    assert scrape(url)["sglang:num_running_reqs"] == 0


def test_a_long_answer_cycles_the_words(procs: Procs):
    _, url = ready_worker(procs, "decode")
    code, body = fetch(url + "/v1/chat/completions", "POST", chat(30))
    words = json.loads(body)["choices"][0]["message"]["content"].split()
    assert code == 200 and len(words) == 30 and words[:4] == ["The", "quick", "brown", "fox"]
    assert words[words.index("fox", 4) - 3:][:4] == ["The", "quick", "brown", "fox"]


def test_the_prefill_counts_prompt_tokens_generates_none_and_finds_a_repeated_system_prompt(procs: Procs):
    _, url = ready_worker(procs, "prefill", "--enable-metrics")
    for room in (1, 2):
        code, _ = fetch(url + "/v1/chat/completions", "POST", {**chat(16), **ROUTED, "bootstrap_room": room})
        assert code == 200
    got = scrape(url)
    assert got["sglang:prompt_tokens_total"] == 2 * PROMPT and got["sglang:generation_tokens_total"] == 0
    assert got["sglang:num_requests_total"] == 2 and got["sglang:cached_tokens_total"] == len(SYSTEM.split())
    assert got["sglang:utilization"] == -1


def test_decode_batch_lines_follow_the_load(procs: Procs):
    worker, url = ready_worker(procs, "decode", "--log-rate", "20")
    lines = batch_lines(worker, "Decode")
    idle = next(lines)
    assert figure(idle, "#running-req") == 0 and figure(idle, "gen throughput (token/s)") == 0
    threads = in_flight(url, [chat(96) for _ in range(2)])
    busy = next(line for line in lines if figure(line, "#running-req") > 0 and figure(line, "#token") > 0)
    assert figure(busy, "#running-req") <= 2 and figure(busy, "#queue-req") == 0
    assert next(line for line in lines if figure(line, "gen throughput (token/s)") > 0)
    joined(threads)
    assert next(line for line in lines if figure(line, "#running-req") == 0 and figure(line, "#token") == 0)


def test_prefill_batch_lines_tell_what_was_prefilled_since_the_last_one(procs: Procs):
    worker, url = ready_worker(procs, "prefill", "--log-rate", "20")
    lines = batch_lines(worker, "Prefill")
    assert figure(next(lines), "#new-seq") == 0
    code, _ = fetch(url + "/generate", "POST", {"text": "word " * 300, **ROUTED, "bootstrap_room": 3})
    assert code == 200
    done = next(line for line in lines if figure(line, "#new-seq") > 0)
    assert (figure(done, "#new-seq"), figure(done, "#new-token"), figure(done, "#cached-token")) == (1, 300, 0)
    assert figure(next(lines), "#new-seq") == 0


@pytest.mark.parametrize("mode", ["generate-500", "transfer-errors"])
def test_a_failing_generation_is_never_counted_as_served(procs: Procs, mode):
    _, url = ready_worker(procs, "decode", "--enable-metrics", "--fail", mode)
    code, _ = fetch(url + "/v1/chat/completions", "POST", {**chat(8), **ROUTED, "bootstrap_room": 5})
    assert code == 500
    assert scrape(url)["sglang:num_requests_total"] == 0


def rank_samples(url: str, name: str) -> dict[str, float]:
    """tp_rank -> value of one sample name in the worker's /metrics."""
    code, body = fetch(url + "/metrics")
    assert code == 200, body
    return {s.labels["tp_rank"]: s.value for family in text_string_to_metric_families(body.decode())
            for s in family.samples if s.name == name}


def test_a_prefill_observes_each_transfer_per_tp_rank_as_sglang_0_5_does(procs: Procs):
    _, url = ready_worker(procs, "prefill", "--enable-metrics", "--gpus", "0,1")
    assert rank_samples(url, "sglang:kv_transfer_latency_ms_count") == {}     # labelled series: first used later
    code, body = fetch(url + "/v1/chat/completions", "POST", chat(4, **ROUTED, bootstrap_room=7))
    assert code == 200, body
    assert rank_samples(url, "sglang:kv_transfer_latency_ms_count") == {"0": 1.0, "1": 1.0}
    sizes = rank_samples(url, "sglang:kv_transfer_total_mb_sum")
    assert sizes["0"] == sizes["1"] == pytest.approx(PROMPT * 0.0686 / 2)


def test_a_failed_transfer_is_counted_and_older_releases_export_no_transfer_series(procs: Procs):
    _, url = ready_worker(procs, "decode", "--enable-metrics", "--fail", "transfer-errors")
    code, _ = fetch(url + "/v1/chat/completions", "POST", chat(4, **ROUTED, bootstrap_room=9))
    assert code == 500
    assert rank_samples(url, "sglang:num_transfer_failed_reqs_total") == {"0": 1.0}
    _, older = ready_worker(procs, "prefill", "--enable-metrics", "--generation", "2025")
    fetch(older + "/v1/chat/completions", "POST", chat(4, **ROUTED, bootstrap_room=8))
    assert not any(name.startswith("sglang:kv_transfer") for name in scrape(older))
