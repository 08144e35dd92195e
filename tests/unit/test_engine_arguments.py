"""A command line read as an installed engine's parser reads it (servers/arguments.py), and its answers kept.

The fixtures are what the probe (servers/arguments_probe.py) printed for the installed SGLang 0.5.23 and vLLM
0.32.0: their real option strings, nargs and choices.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdtui.config import load_config
from pdtui.engine.checks.flags import stand_in_arguments
from pdtui.servers import serving_for
from pdtui.servers.arguments import EngineArguments, Option, unknown_env, unknown_words
from pdtui.servers.arguments_cache import ArgumentsCache
from pdtui.sim import vllm_worker, worker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SAMPLES = Path(__file__).resolve().parents[2] / "sample_configs"


def engine(name: str) -> EngineArguments:
    version = {"sglang": "0.5.23", "vllm": "0.32.0"}[name]
    answer = json.loads((FIXTURES / f"{name}-{version}-arguments.json").read_text())
    return EngineArguments.from_answer(name, answer, "VLLM_" if name == "vllm" else "")


SGLANG, VLLM = engine("sglang"), engine("vllm")


def said(words: list[str], known: EngineArguments) -> list[tuple[int, str]]:
    return [(u.index, u.text) for u in unknown_words(words, known)]


def test_a_flag_of_another_release_is_named_with_the_nearest_one_it_has():
    assert said(["--model-path", "m", "--disagg-mode", "prefill", "--enable-metrcs"], SGLANG) == [
        (2, "sglang 0.5.23 has no --disagg-mode (did you mean '--disaggregation-mode'?)"),
        (4, "sglang 0.5.23 has no --enable-metrcs (did you mean '--enable-metrics'?)")]


def test_a_flag_with_nothing_near_is_named_alone():
    assert said(["--frobnicate", "3"], SGLANG) == [(0, "sglang 0.5.23 has no --frobnicate")]


def test_a_value_outside_the_choices_is_refused_in_either_spelling_with_the_nearest_choice():
    found = said(["--disaggregation-transfer-backend", "mooncake-tcp", "--attention-backend=torch-native"], SGLANG)
    assert found[0] == (1, "sglang 0.5.23 has no --disaggregation-transfer-backend 'mooncake-tcp' (did you mean "
                           "'mooncake_tcp'?): it takes mooncake, nixl, ascend, fake, mori, mooncake_tcp")
    assert found[1][0] == 2 and found[1][1].startswith(
        "sglang 0.5.23 has no --attention-backend 'torch-native' (did you mean 'torch_native'?): it takes triton, ")
    assert found[1][1].endswith(", ...")        # 25 backends: the first twelve shown


def test_a_long_flag_cut_short_is_taken_while_it_stays_unambiguous_as_argparse_takes_it():
    assert said(["--tp", "2", "--max-total-token", "4096"], SGLANG) == []     # --tp-size, --max-total-tokens
    assert said(["--enable-metric"], SGLANG) == [
        (0, "--enable-metric is ambiguous to sglang 0.5.23: it could be --enable-metrics, "
            "--enable-metrics-for-all-schedulers")]


def test_values_are_not_read_as_flags_and_flags_without_a_value_take_none():
    assert said(["--disable-overlap-schedule", "--numa-node", "0", "1", "--page-size", "-1"], SGLANG) == []
    # a store-true flag takes no value: the word after it is the next option's business
    assert said(["--enable-metrics", "--attention-backend", "flashmla"], SGLANG) == []


def test_every_value_of_a_many_valued_option_is_held_to_its_choices():
    known = EngineArguments("x 1", {"--modes": Option("+", ("a", "b"))})
    assert said(["--modes", "a", "c", "b"], known) == [(2, "x 1 has no --modes 'c': it takes a, b")]


def test_vllm_reads_underscores_as_dashes_keys_of_a_json_flag_and_its_optimisation_level():
    words = ["--max_model_len", "8192", "--kv-transfer-config.kv_connector", "NixlConnector", "-O3", "-tp", "2",
             "--block-size=32", "--no-enable-log-requests"]
    assert said(words, VLLM) == []
    assert said(["--enforce-eagre", "--dtype", "float33", "--kv-transfer-confg.kv_role", "x"], VLLM) == [
        (0, "vllm 0.32.0 has no --enforce-eagre (did you mean '--enforce-eager'?)"),
        (2, "vllm 0.32.0 has no --dtype 'float33' (did you mean 'float32'?): it takes auto, bfloat16, float, float16, "
            "float32, half"),
        (3, "vllm 0.32.0 has no --kv-transfer-confg.kv_role (did you mean '--kv-transfer-config'?)")]


def test_an_engine_variable_is_checked_where_the_engine_lists_its_variables():
    names = ["VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_KVCACHE_SPAC", "HF_HUB_OFFLINE", "UCX_TLS"]
    assert unknown_env(names, VLLM) == [
        ("VLLM_CPU_KVCACHE_SPAC", "vllm 0.32.0 reads no VLLM_CPU_KVCACHE_SPAC (did you mean 'VLLM_CPU_KVCACHE_SPACE'?)")]
    assert unknown_env(["SGLANG_HOST_IPP"], SGLANG) == []      # SGLang lists no variables pdtui trusts


# What each sample launches that SGLang 0.5.23 or vLLM 0.32.0 would refuse: wide-ep's decode is the DeepSeek
# reproductions' own, written for a release whose --cuda-graph-bs 0.5.23 split in two.
REFUSED = {"wide-ep.yaml": {"decode": ["--cuda-graph-bs is ambiguous to sglang 0.5.23: it could be "
                                       "--cuda-graph-bs-decode, --cuda-graph-bs-prefill"]}}


@pytest.mark.parametrize("sample", ["reference.yaml", "slurm.yaml", "vllm-pd.yaml", "wide-ep.yaml"])
def test_the_flags_the_sample_configs_launch_are_read_against_the_releases(sample):
    deployment = load_config(SAMPLES / sample)
    refused = {}
    for cfg in deployment.services.values():
        if cfg.launch is not None and not cfg.is_router and not cfg.follower:
            known = VLLM if cfg.engine == "vllm" else SGLANG
            if found := [text for _, text in said(serving_for(cfg).command_line(deployment, cfg)[3:], known)]:
                refused[cfg.name] = found
    assert refused == REFUSED.get(sample, {})


def test_the_sims_own_parsers_are_described_as_an_engine_describes_its_own():
    for module, parser in (("pdtui.sim.worker", worker.build_parser()),
                           ("pdtui.sim.vllm_worker", vllm_worker.build_parser())):
        known = stand_in_arguments(module)
        assert set(known.options) == {s for a in parser._actions for s in a.option_strings}
        assert said(["--hots", "127.0.0.1"], known) == [(0, f"{module} has no --hots (did you mean '--host'?)")]


def test_an_answer_is_kept_private_and_a_link_planted_at_its_name_is_neither_read_nor_written_through(tmp_path):
    cache = ArgumentsCache(tmp_path / "cache")
    cache.keep("gpu0@10.0.0.1", "/opt/py", "sglang", {"version": "0.5.23", "options": {}})
    [kept] = (tmp_path / "cache").iterdir()
    assert kept.stat().st_mode & 0o777 == 0o600 and (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    assert cache.load("gpu0@10.0.0.1", "/opt/py", "sglang") == {"version": "0.5.23", "options": {}}
    assert cache.load("gpu0@10.0.0.2", "/opt/py", "sglang") is None       # another host's is its own
    target = tmp_path / "elsewhere.json"
    target.write_text('{"version": "9", "options": {}}')
    kept.unlink()
    kept.symlink_to(target)
    assert cache.load("gpu0@10.0.0.1", "/opt/py", "sglang") is None
    cache.keep("gpu0@10.0.0.1", "/opt/py", "sglang", {"version": "0.5.24", "options": {}})
    assert target.read_text() == '{"version": "9", "options": {}}' and not kept.is_symlink()
