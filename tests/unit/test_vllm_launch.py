"""vLLM's servers and router as pdtui launches them: their command lines, the NIXL side channel each gets, what
the config refuses, how a hand-written unit is read back, and what a prefill and a decode must share."""

from __future__ import annotations

import json
import shlex

import pytest

from pdtui.config import ConfigError, load_config, parse_config
from pdtui.servers import ServerCommand, serving_named
from pdtui.servers.vllm import launch, pairing
from pdtui.support.data import data_dir
from pdtui.targets.systemd.unit_drift import parse_installed, service_drift
from pdtui.targets.systemd.unit_files import render_units

VLLM = serving_named("vllm")
SAMPLE = load_config(data_dir("sample_configs") / "vllm-pd.yaml")
UNITS = {u.service: u.text for u in render_units(SAMPLE)}

CPU_PAIR = """\
name: tiny
engine: vllm
hosts:
  box: {local: true}
services:
  prefill:
    host: box
    unit: vllm-prefill
    role: prefill
    port: 18200
    launch: {model: /models/tiny, python: /opt/vllm/bin/python}
  decode:
    host: box
    unit: vllm-decode
    role: decode
    port: 18300
    launch: {model: /models/tiny, python: /opt/vllm/bin/python}
  router:
    host: box
    unit: vllm-router
    role: router
    port: 18000
    launch: {command: [/opt/vllm/bin/vllm-router]}
"""


def argv(deployment, name: str) -> list[str]:
    return VLLM.command_line(deployment, deployment.services[name])


def test_a_server_runs_the_openai_server_with_its_side_of_the_kv_connector():
    words = argv(SAMPLE, "prefill")
    assert words[:3] == ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert words[words.index("--model") + 1] == "deepseek-ai/DeepSeek-V4-Flash"
    assert words[words.index("--tensor-parallel-size") + 1] == "4"
    config = json.loads(words[words.index("--kv-transfer-config") + 1])
    assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert json.loads(argv(SAMPLE, "decode")[argv(SAMPLE, "decode").index("--kv-transfer-config") + 1])["kv_role"] \
        == "kv_consumer"


def test_a_server_without_gpus_keeps_its_kv_in_the_cpus_memory():
    deployment = parse_config(CPU_PAIR)
    words = argv(deployment, "decode")
    assert json.loads(words[words.index("--kv-transfer-config") + 1])["kv_buffer_device"] == "cpu"
    assert "--tensor-parallel-size" not in words


def test_each_nixl_server_of_a_host_gets_a_side_channel_port_of_its_own_at_an_address_its_decodes_reach():
    deployment = parse_config(CPU_PAIR)
    ports = {name: VLLM.environment(deployment, deployment.services[name]) for name in ("prefill", "decode")}
    assert ports["prefill"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] != ports["decode"]["VLLM_NIXL_SIDE_CHANNEL_PORT"]
    assert ports["prefill"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    assert VLLM.environment(deployment, deployment.services["router"]) == {}
    remote = VLLM.environment(SAMPLE, SAMPLE.services["prefill"])
    assert remote["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.1.230.171"
    assert "Environment=VLLM_NIXL_SIDE_CHANNEL_PORT=" in UNITS["prefill"]


def test_a_side_channel_port_the_launch_gives_is_kept_and_not_given_to_another():
    text = CPU_PAIR.replace("launch: {model: /models/tiny, python: /opt/vllm/bin/python}\n  decode:",
                            "launch: {model: /models/tiny, env: {VLLM_NIXL_SIDE_CHANNEL_PORT: 5600}}\n  decode:")
    deployment = parse_config(text)
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in VLLM.environment(deployment, deployment.services["prefill"])
    assert VLLM.environment(deployment, deployment.services["decode"])["VLLM_NIXL_SIDE_CHANNEL_PORT"] != "5600"


def test_the_router_is_vllm_router_in_pd_mode_looking_at_its_workers_each_second():
    words = argv(parse_config(CPU_PAIR), "router")
    assert words[0] == "/opt/vllm/bin/vllm-router" and "--vllm-pd-disaggregation" in words
    assert words[words.index("--prefill") + 1] == "http://127.0.0.1:18200"
    assert words[words.index("--decode") + 1] == "http://127.0.0.1:18300"
    assert words[words.index("--worker-startup-check-interval") + 1] == "1"
    assert "--prometheus-port" in UNITS["router"]


@pytest.mark.parametrize(("line", "expected"), [
    ("    role: prefill\n    port: 18200\n    launch: {model: /models/tiny, python: /opt/vllm/bin/python}",
     "'ib_device' is not a launch key of a vLLM server"),
    ("    role: router\n    port: 18000\n    launch: {command: [/opt/vllm/bin/vllm-router]}",
     "'package' is not a launch key of vLLM's router"),
])
def test_a_launch_key_vllm_has_no_use_for_is_refused_naming_it(line, expected):
    key = "ib_device: mlx5_0" if "prefill" in line else "package: smg"
    text = CPU_PAIR.replace(line, line.replace("launch: {", "launch: {" + key + ", "))
    with pytest.raises(ConfigError, match=expected):
        parse_config(text)


def test_a_bootstrap_port_or_a_transfer_backend_vllm_lacks_is_refused():
    with pytest.raises(ConfigError, match="a bootstrap server is SGLang's here"):
        parse_config(CPU_PAIR.replace("    port: 18200\n", "    port: 18200\n    bootstrap_port: 8998\n"))
    with pytest.raises(ConfigError, match="expected a KV transfer backend of vLLM: one of nixl, mooncake, got 'mori'"):
        parse_config(CPU_PAIR.replace("launch: {model: /models/tiny, python: /opt/vllm/bin/python}\n  decode:",
                                      "launch: {model: /models/tiny, transfer_backend: mori}\n  decode:"))


def drift(service: str, text: str):
    return service_drift(SAMPLE, SAMPLE.services[service], parse_installed([("/etc/systemd/system/x.service", text)]))


@pytest.mark.parametrize("service", ["prefill", "decode", "router"])
def test_a_generated_vllm_unit_has_no_drift(service):
    assert drift(service, UNITS[service]) == []


def test_a_unit_that_plays_the_other_side_is_an_error():
    [found] = drift("prefill", UNITS["prefill"].replace("kv_producer", "kv_consumer"))
    assert found.text == "prefill: its unit runs as decode (--kv-transfer-config), the config says prefill"
    assert drift("prefill", UNITS["prefill"].replace("kv_producer", "kv_both")) == []   # the router's choice


def command(words: str, **env: str) -> ServerCommand:
    return ServerCommand(tuple(shlex.split(words)), env, "its unit")


NIXL = "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'"


def test_a_pair_of_two_model_strings_or_dtypes_is_refused_before_the_weights_load():
    found = pairing.pair_mismatches(("prefill", command(f"vllm serve /models/x --dtype bfloat16 {NIXL}")),
                                    ("decode", command(f"vllm serve x --dtype float32 {NIXL}")))
    assert [(m.level, m.setting) for m in found] == [("error", "model"), ("error", "dtype")]
    assert "NIXL compatibility hash mismatch" in found[0].text


def test_a_dtype_only_one_side_gives_is_a_warning_and_a_larger_prefill_block_is_refused():
    found = pairing.pair_mismatches(("prefill", command(f"vllm serve x --dtype bfloat16 --block-size 64 {NIXL}")),
                                    ("decode", command(f"vllm serve x --block-size 32 {NIXL}")))
    assert [(m.level, m.setting) for m in found] == [("warning", "dtype"), ("error", "block size")]


def test_two_nixl_servers_of_one_host_on_one_side_channel_port_are_refused():
    deployment = parse_config(CPU_PAIR)
    servers = [(deployment.services[name], command(f"vllm serve x {NIXL}")) for name in ("prefill", "decode")]
    [found] = pairing.host_mismatches(servers)
    assert found.text.startswith("decode and prefill both take NIXL side-channel port 5600 on box")
    assert "hangs at start" in found.text
    apart = [(servers[0][0], command(f"vllm serve x {NIXL}", VLLM_NIXL_SIDE_CHANNEL_PORT="5601")), servers[1]]
    assert pairing.host_mismatches(apart) == []


def test_running_servers_of_two_releases_or_models_are_refused():
    found = pairing.running_mismatches(("prefill", {"root": "/m/x", "model": "x", "version": "0.32.0"}),
                                       ("decode", {"root": "/m/x", "model": "x", "version": "0.31.1"}))
    assert [(m.level, m.setting) for m in found] == [("error", "vLLM version")]


def test_the_transfer_path_is_the_connectors():
    assert VLLM.transfer_path(command(f"vllm serve x {NIXL}")).backend == "nixl"
    assert VLLM.transfer_path(command("vllm serve x")) is None
    assert launch.runs_server(shlex.split("/opt/v/bin/python -m vllm.entrypoints.openai.api_server --model x"))
