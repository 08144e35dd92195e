"""SGLang's KV transfer series, read around a generation (checks/kv_transfer.py)."""

from __future__ import annotations

import pytest

from pdtui.engine.checks.kv_transfer import kv_seen
from pdtui.servers.sglang.metrics import kv_totals
from pdtui.vocabulary.figures import KvTotals

LABELS = 'model_name="m",engine_type="prefill",tp_rank="{rank}",pp_rank="0",moe_ep_rank="0"'


def prefill_metrics(transfers: int, mb_per_rank: float, failed: int = 0, ranks: int = 2) -> str:
    """0.5.23's text for a prefill whose ranks each observed ``transfers`` transfers of ``mb_per_rank`` MB."""
    lines = ["# TYPE sglang:kv_transfer_latency_ms histogram", "# TYPE sglang:kv_transfer_total_mb histogram"]
    for rank in range(ranks):
        labels = LABELS.format(rank=rank)
        lines += [f'sglang:kv_transfer_latency_ms_bucket{{{labels},le="+Inf"}} {transfers}',
                  f"sglang:kv_transfer_latency_ms_count{{{labels}}} {transfers}",
                  f"sglang:kv_transfer_latency_ms_sum{{{labels}}} {transfers * 2.5}",
                  f'sglang:kv_transfer_total_mb_bucket{{{labels},le="+Inf"}} {transfers}',
                  f"sglang:kv_transfer_total_mb_count{{{labels}}} {transfers}",
                  f"sglang:kv_transfer_total_mb_sum{{{labels}}} {transfers * mb_per_rank}"]
    if failed:
        lines += ["# TYPE sglang:num_transfer_failed_reqs_total counter",
                  f"sglang:num_transfer_failed_reqs_total{{{LABELS.format(rank=0)}}} {failed}"]
    return "\n".join(lines) + "\n"


def test_every_rank_is_summed():
    totals = kv_totals(prefill_metrics(3, 6.0, ranks=2))
    assert totals == KvTotals(transfers=6, megabytes=36.0)


def test_a_server_without_the_series_says_so():
    assert kv_totals("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 0\n") == KvTotals(exported=False)


def test_the_series_are_read_among_a_whole_server_text():
    """A server's text holds a hundred other families; the KV series are read from it alone."""
    others = "".join(f"# TYPE sglang:other_{n} gauge\nsglang:other_{n}{{tp_rank=\"0\"}} {n}\n" for n in range(50))
    assert kv_totals(others + prefill_metrics(3, 6.0, failed=2)) == KvTotals(transfers=6, megabytes=36.0, failed=2)


def test_text_that_is_not_prometheus_still_raises():
    with pytest.raises(ValueError):
        kv_totals("<html>not found</html>\n{")


def test_a_transfer_seen_names_its_prefill_and_what_moved():
    before = {"prefill-0": kv_totals(prefill_metrics(1, 6.0)), "decode": KvTotals(exported=False)}
    after = {"prefill-0": kv_totals(prefill_metrics(2, 6.0)), "decode": KvTotals(exported=False)}
    seen = kv_seen(before, after)
    assert (seen.failed, seen.moved) == (False, True)
    assert seen.words == "KV moved prefill→decode, 12 MB from prefill-0"


def test_the_first_transfer_counts_when_the_series_appear_with_it():
    # SGLang's labelled series appear when first used: before the first transfer a prefill has none
    seen = kv_seen({"prefill": KvTotals(exported=False)}, {"prefill": kv_totals(prefill_metrics(1, 35.0))})
    assert seen.moved and seen.words == "KV moved prefill→decode, 70 MB from prefill"


def test_a_failed_transfer_counter_that_rose_fails_naming_the_service():
    before = {"prefill": kv_totals(prefill_metrics(1, 6.0))}
    after = {"prefill": kv_totals(prefill_metrics(1, 6.0, failed=1))}
    seen = kv_seen(before, after)
    assert seen.failed and seen.words == "KV transfer failed on prefill (+1)"


def test_without_metrics_or_series_the_path_is_proven_by_tokens_only():
    none = kv_seen({"prefill": None}, {"prefill": None})
    assert not none.moved and not none.failed
    assert none.words == "KV path proven by tokens only (no server exports its KV transfer series)"
    still = kv_seen({"prefill": kv_totals(prefill_metrics(1, 6.0))}, {"prefill": kv_totals(prefill_metrics(1, 6.0))})
    assert still.words == "KV path proven by tokens only (the servers' KV transfer series did not move)"


def test_a_large_transfer_is_told_in_gigabytes():
    seen = kv_seen({"p": KvTotals(exported=False)}, {"p": KvTotals(transfers=1, megabytes=2560.0)})
    assert seen.words == "KV moved prefill→decode, 2.5 GB from p"


class Meter:
    """Readings of the backends' KV series, one per call, the last one repeated."""

    def __init__(self, *readings: dict) -> None:
        self.readings = list(readings)
        self.calls = 0

    async def __call__(self) -> dict:
        self.calls += 1
        return self.readings[min(self.calls, len(self.readings)) - 1]


def probe(meter: Meter):
    from pdtui.engine.checks.router import RouterProbe
    return RouterProbe(None, 8000, [], kv_meter=meter, settle=5.0)  # type: ignore[arg-type]


async def test_without_metrics_anywhere_the_kv_check_does_not_wait():
    meter = Meter({"prefill": None, "decode": None})
    check = await probe(meter)._kv_moved({"prefill": None, "decode": None})
    assert check.ok and meter.calls == 1 and "tokens only" in check.detail


async def test_a_series_that_appears_a_moment_after_the_answer_is_waited_for():
    first = KvTotals(transfers=1, megabytes=35.0)
    meter = Meter({"prefill": KvTotals(exported=False)}, {"prefill": KvTotals(exported=False)}, {"prefill": first})
    check = await probe(meter)._kv_moved({"prefill": KvTotals(exported=False)})
    assert check.ok and check.detail == "KV moved prefill→decode, 35 MB from prefill" and meter.calls == 3
