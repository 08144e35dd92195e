"""A prefill against a decode, and one host's servers against each other, from their command lines: each rule's
refusal and its pass."""

from __future__ import annotations

from pdtui.config import parse_config
from pdtui.servers import ServerCommand
from pdtui.servers.sglang.pairing import Side, host_mismatches, pair_mismatches, running_mismatches

BASE = ["python3", "-m", "sglang.launch_server", "--disaggregation-mode", "prefill", "--model-path",
        "deepseek-ai/DeepSeek-V4-Flash", "--tp", "4"]


def server(*flags: str, source: str = "its unit t.service on gpu0", env: dict | None = None) -> ServerCommand:
    return ServerCommand((*BASE, *flags), env or {}, source)


def pair(prefill: ServerCommand, decode: ServerCommand):
    return pair_mismatches(("prefill", prefill), ("decode", decode))


def settings(found) -> list[tuple[str, str]]:
    return [(m.level, m.setting) for m in found]


def test_a_pair_that_runs_alike_has_nothing_to_say():
    assert pair(server("--page-size", "64"), server("--page-size", "64")) == []


def test_two_page_sizes_are_refused_naming_both_values_and_where_each_was_read():
    [found] = pair(server("--page-size", "64", source="its unit p.service on gpu0"),
                   server("--page-size", "128", source="its unit d.service on gpu1"))
    assert (found.level, found.kind, found.setting, found.values) == ("error", "pair", "page size", ("64", "128"))
    assert found.services == ("decode", "prefill")
    assert found.text == ("prefill and decode disagree on --page-size: prefill runs 64 (its unit p.service on gpu0), "
                          "decode runs 128 (its unit d.service on gpu1)")


def test_a_page_size_given_on_one_side_only_is_a_warning():
    [found] = pair(server("--page-size", "64"), server())
    assert (found.level, found.values) == ("warning", ("64", "unset"))
    assert "only prefill gives it (64" in found.text and "Page size mismatch" in found.text


def test_another_model_or_revision_is_refused():
    other = ServerCommand(("python3", "-m", "sglang.launch_server", "--disaggregation-mode", "decode", "--model-path",
                           "Qwen/Qwen3-8B"), {}, "launch")
    assert settings(pair(server(), other)) == [("error", "model")]
    assert settings(pair(server("--revision", "abc"), server("--revision", "def"))) == [("error", "revision")]
    assert settings(pair(server("--revision", "abc"), server())) == [("warning", "revision")]
    assert "runs the model's default branch" in pair(server("--revision", "abc"), server())[0].text
    wrapped = ServerCommand(("/opt/bin/start-decode.sh",), {}, "its unit d.service on gpu1")
    assert pair(server("--disaggregation-transfer-backend", "nixl"), wrapped) == [], "a wrapper's flags are unknown"


def test_transfer_backends_that_differ_are_refused_and_mooncake_over_tcp_is_a_warning():
    assert settings(pair(server("--disaggregation-transfer-backend", "nixl"), server())) == [
        ("error", "transfer backend")]
    assert settings(pair(server(), server("--disaggregation-transfer-backend", "mooncake"))) == []
    assert settings(pair(server("--disaggregation-transfer-backend", "mooncake_tcp"), server())) == [
        ("warning", "transfer backend")]


def test_kv_dtypes_are_compared_as_sglang_compares_them_as_strings():
    assert settings(pair(server("--kv-cache-dtype", "bf16"), server("--kv-cache-dtype", "bfloat16"))) == [
        ("error", "KV cache dtype")]
    assert settings(pair(server("--kv-cache-dtype", "fp8_e4m3"), server())) == [("warning", "KV cache dtype")]
    assert settings(pair(server("--kv-cache-dtype", "auto"), server())) == []


def test_an_ib_device_named_on_one_side_only_is_a_warning():
    assert settings(pair(server("--disaggregation-ib-device", "mlx5_0"), server())) == [("warning", "IB device")]
    assert settings(pair(server("--disaggregation-ib-device", "mlx5_0"),
                         server("--disaggregation-ib-device", "mlx5_4"))) == []


def test_layouts_sglang_cannot_pair_are_refused_and_different_attention_tp_sizes_pair():
    assert settings(pair(server(), server("--attn-cp-size", "2"))) == [("error", "attention CP")]
    assert settings(pair(server("--attn-cp-size", "2"), server("--attn-cp-size", "2"))) == [("error", "attention CP")]
    assert settings(pair(server("--pp-size", "2"), server("--pp-size", "4"))) == [("error", "pipeline")]
    assert settings(pair(server("--pp-size", "2"), server())) == []
    assert settings(pair(server(), server("--tp", "8"))) == []
    assert settings(pair(server(), server("--tp", "8", "--dp-size", "2", "--enable-dp-attention"))) == []


HOST = """\
name: t
hosts: {gpu0: {address: 10.0.0.1}}
services:
  prefill: {host: gpu0, unit: p, role: prefill, port: 30000, bootstrap_port: 8998, gpus: [0, 1, 2, 3]}
  decode: {host: gpu0, unit: d, role: decode, port: 30002, gpus: [4, 5, 6, 7]}
  router: {host: gpu0, unit: r, role: router, port: 30001}
"""


def servers(prefill: ServerCommand, decode: ServerCommand):
    services = parse_config(HOST).services
    return host_mismatches([(services["prefill"], prefill), (services["decode"], decode)])


def test_rendezvous_ports_that_collide_on_one_host_are_refused():
    [found] = servers(server("--dist-init-addr", "127.0.0.1:5000", source="its unit p"),
                      server("--dist-init-addr", "127.0.0.1:5000", source="its unit d"))
    assert (found.level, found.kind, found.setting, found.services) == ("error", "host", "port", ("decode", "prefill"))
    assert found.text == ("decode and prefill both take port 5000 on gpu0: decode's --dist-init-addr 127.0.0.1:5000 "
                          "(its unit d) and prefill's --dist-init-addr 127.0.0.1:5000 (its unit p)")


def test_attention_dp_takes_the_ports_above_the_rendezvous_port_and_a_servers_port_among_them_is_refused():
    prefill = server("--port", "30000", "--dist-init-addr", "127.0.0.1:29998", "--tp", "4", "--dp-size", "4",
                     "--enable-dp-attention")
    [found] = servers(prefill, server("--port", "30002", "--dist-init-addr", "127.0.0.1:6000"))
    assert found.text.startswith("decode and prefill both take port 30002 on gpu0: decode's --port")
    assert "prefill's --dist-init-addr 127.0.0.1:29998 + 4 (attention DP)" in found.text
    assert servers(server("--port", "30000", "--dist-init-addr", "127.0.0.1:5000"),
                   server("--port", "30002", "--dist-init-addr", "127.0.0.1:6000")) == []


def test_a_prefills_bootstrap_port_is_one_of_its_ports_by_default():
    [found] = servers(server(), server("--dist-init-addr", "127.0.0.1:8998"))
    assert "prefill's bootstrap server" in found.text


def test_fake_on_a_prefill_is_refused_and_on_a_decode_alone_it_is_not():
    fake = ("--disaggregation-transfer-backend", "fake")
    [found] = [m for m in servers(server(*fake, source="its unit p"), server(*fake)) if m.setting == "transfer backend"]
    assert (found.level, found.services) == ("error", ("prefill",))
    assert found.text == ("prefill runs --disaggregation-transfer-backend fake (its unit p): SGLang refuses it on a "
                          "prefill (fake moves no KV; it is for a decode alone)")
    assert [m for m in servers(server(), server(*fake)) if m.setting == "transfer backend"] == []


def test_tp_beyond_the_gpus_its_unit_is_given_is_refused():
    [found] = servers(server("--tp", "8", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),
                      server(env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"}))
    assert (found.level, found.setting, found.values, found.services) == ("error", "GPUs", ("8", "4"), ("prefill",))
    assert found.text == ("prefill needs 8 GPUs on gpu0 (--tp 8) but CUDA_VISIBLE_DEVICES gives it 4 (its unit "
                          "t.service on gpu0)")
    two_nodes = server("--tp", "8", "--nnodes", "2", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert servers(two_nodes, server(env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})) == []


INFO = {"model_path": "deepseek-ai/DeepSeek-V4-Flash", "revision": None, "page_size": 64, "kv_cache_dtype": "auto",
        "disaggregation_transfer_backend": "mooncake", "version": "0.5.23"}


def running(prefill: dict, decode: dict):
    return running_mismatches(("prefill", {**INFO, **prefill}), ("decode", {**INFO, **decode}))


def test_servers_that_run_alike_once_up_have_nothing_to_say():
    assert running({}, {}) == []


def test_a_value_the_servers_resolved_differently_is_refused_naming_the_field():
    [found] = running({"page_size": 64}, {"page_size": 1})
    assert (found.level, found.kind, found.setting, found.values) == ("error", "running", "page size", ("64", "1"))
    assert found.sources == ("prefill's /server_info", "decode's /server_info")
    assert found.text == "prefill and decode run different page sizes: prefill 64, decode 1 (their /server_info)"


def test_another_minor_release_refuses_and_another_patch_warns():
    [minor] = running({"version": "0.4.10"}, {})
    assert (minor.level, minor.text) == ("error", "prefill and decode run different SGLang minor releases: prefill "
                                                  "0.4.10, decode 0.5.23")
    [patch] = running({"version": "0.5.22"}, {})
    assert patch.level == "warning" and "patch releases" in patch.text


def test_a_key_an_older_release_does_not_report_is_not_compared():
    older = {k: v for k, v in INFO.items() if k not in ("page_size", "kv_cache_dtype")}
    assert running_mismatches(("prefill", older), ("decode", {**INFO, "page_size": 1})) == []


def test_once_up_a_revision_one_side_leaves_unset_and_mooncake_over_tcp_on_one_side_are_warnings_as_before_start():
    [revision] = running({"revision": "abc"}, {})
    [tcp] = running({"disaggregation_transfer_backend": "mooncake_tcp"}, {})
    assert revision.level == tcp.level == "warning"
    assert "default branch" in revision.text and "Mooncake over TCP on one side only" in tcp.text
    [both] = running({"revision": "abc"}, {"revision": "def"})
    assert both.level == "error"


def test_a_side_knows_a_switch_and_a_flag_given_with_its_value_and_nothing_else():
    side = Side("decode", ServerCommand(("python", "-m", "sglang.launch_server", "--enable-dp-attention",
                                         "--dp-size=2", "--tp", "4"), {}, "its unit"))
    assert side.has("--enable-dp-attention") and side.has("--dp-size") and side.has("--tp")
    assert not side.has("--enable-metrics") and not side.has("--dp")
    assert side.attn_dp == 2
