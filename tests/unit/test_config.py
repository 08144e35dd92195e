"""The deployment config: errors as one positioned line, defaults, and the bring-up graph."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from pdtui.config import ConfigError, Deployment, load_config, parse_config, parse_duration

BAD_DIR = Path(__file__).parents[1] / "configs" / "bad"
BAD_CONFIGS = sorted(BAD_DIR.glob("*.yaml"))
SAMPLES_DIR = Path(__file__).parents[2] / "sample_configs"
SAMPLES = sorted(SAMPLES_DIR.glob("*.yaml"))
EXPECT = re.compile(r"# expect: (\d+):(\d+): (.+)")

BASE = """\
name: demo
hosts:
  gpu0:
    address: 10.0.0.1
services:
  prefill:
    host: gpu0
    unit: sglang-prefill
    role: prefill
    gpus: [0, 1]
    port: 30000
  decode:
    host: gpu0
    unit: sglang-decode
    role: decode
    gpus: [2, 3]
    port: 30002
  router:
    host: gpu0
    unit: sglang-router
    role: router
    port: 30001
"""


def config_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "t.yaml")
    return caught.value


# --------------------------------------------------------------------------- broken configs

def test_there_are_many_broken_configs() -> None:
    assert len(BAD_CONFIGS) >= 40


@pytest.mark.parametrize("path", BAD_CONFIGS, ids=lambda p: p.stem)
def test_broken_config_names_file_line_column_and_what_was_expected(path: Path) -> None:
    expect = EXPECT.fullmatch(path.read_text().splitlines()[0])
    assert expect, f"{path.name} must begin with '# expect: LINE:COL: message'"
    line, col, fragment = expect.groups()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    error = caught.value
    assert str(error).startswith(f"{path}:{line}:{col}: ")
    assert fragment in error.message
    assert "\n" not in str(error)
    assert (error.source, error.line, error.col) == (str(path), int(line), int(col))


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty config"),
        (b"# only a comment\n\n", "empty config"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
    ],
    ids=["empty", "comment-only", "binary"],
)
def test_unusable_file_is_one_line_at_1_1(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=fragment) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}:1:1: ")


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory") as caught:
        load_config(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path}:1:1: ")


def test_missing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="no such file") as caught:
        load_config(str(path))
    assert str(caught.value) == f"{path}:1:1: no such file, expected a YAML config file"


def test_non_utf8_byte_is_located(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: demo\nhosts:\n  caf\xe9: {local: true}\n")
    with pytest.raises(ConfigError, match="byte 0xe9 is not UTF-8") as caught:
        load_config(path)
    assert (caught.value.line, caught.value.col) == (3, 6)


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + BASE.encode())
    assert load_config(path).name == "demo"


def test_parse_config_names_its_source() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("name: [")
    assert str(caught.value).startswith("<config>:")


def test_control_character_in_text_is_located() -> None:
    error = config_error("name: demo\nhosts: \x07\n")
    assert (error.line, error.col, "#x0007" in error.message) == (2, 8, True)


def test_recursive_alias_is_an_error_not_a_crash() -> None:
    error = config_error("name: &a [*a]\n")
    assert "recursive alias" in error.message


def test_alias_bomb_is_stopped() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    error = config_error("\n".join(lines) + "\n")
    assert "too many nodes" in error.message


def test_typo_wins_over_the_missing_key_it_causes() -> None:
    error = config_error(BASE.replace("    host: gpu0\n    unit: sglang-prefill", "    hots: gpu0\n    unit: sglang-prefill"))
    assert error.message == "unknown key 'hots' in service 'prefill' (did you mean 'hosts'?)"


def test_unknown_key_far_from_any_known_one_has_no_suggestion() -> None:
    error = config_error(BASE + "colour: blue\n")
    assert error.message == "unknown key 'colour' in the top level"


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_mangled_config_gives_a_deployment_or_one_line(data: st.DataObject) -> None:
    position = data.draw(st.integers(0, len(BASE)))
    junk = data.draw(st.text(alphabet="\t\n :-[]{}&*!|>'\"#%@`0a", max_size=6))
    try:
        parse_config(BASE[:position] + junk + BASE[position:], "m.yaml")
    except ConfigError as error:
        assert "\n" not in str(error) and str(error).startswith("m.yaml:")


# --------------------------------------------------------------------------- sample configs

@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_sample_config_loads(path: Path) -> None:
    deployment = load_config(path)
    assert deployment.services and deployment.source == str(path)


def test_samples_include_the_three_documented_deployments() -> None:
    assert {"reference", "two-hosts", "multi-node"} <= {path.stem for path in SAMPLES}


def test_reference_sample_is_the_reference_deployment() -> None:
    dep = load_config(SAMPLES_DIR / "reference.yaml")
    prefill, decode, router = (dep.services[name] for name in ("prefill", "decode", "router"))
    assert dep.name == "dsv4-flash-pd"
    assert (dep.hosts["gpu0"].address, dep.hosts["gpu0"].user) == ("10.1.230.171", "root")
    assert (prefill.unit, prefill.gpus, prefill.numa, prefill.port) == ("sglang-dsv4-prefill.service", (0, 1, 2, 3), 0, 30000)
    assert prefill.replaces == ("sglang-dsv4.service",)
    assert (decode.unit, decode.gpus, decode.numa, decode.port) == ("sglang-dsv4-decode.service", (4, 5, 6, 7), 1, 30002)
    assert (router.unit, router.port, router.timeout) == ("sglang-dsv4-router.service", 30001, 120.0)
    assert dep.levels() == [["prefill", "decode"], ["router"]]


def test_multi_node_sample_merges_anchored_settings() -> None:
    dep = load_config(SAMPLES_DIR / "multi-node.yaml")
    roles = [svc.role for svc in dep.services.values()]
    assert (roles.count("prefill"), roles.count("decode")) == (4, 2)
    assert all(len(svc.gpus) == 8 for svc in dep.services.values() if svc.role != "router")
    assert dep.services["prefill-2"].host == "prefill-2"
    assert dep.services["router"].host not in {svc.host for svc in dep.services.values() if svc.role != "router"}


# --------------------------------------------------------------------------- defaults

def test_backend_roles_default_to_log_and_health_checks() -> None:
    prefill = parse_config(BASE).services["prefill"]
    assert (prefill.ready.log, prefill.ready.http, prefill.ready.tcp) == ("fired up and ready", "/health", False)


def test_router_defaults_to_a_tcp_check_and_waiting_for_every_backend() -> None:
    dep = parse_config(BASE + "  exporter:\n    host: gpu0\n    unit: node-exporter\n")
    router = dep.services["router"]
    assert (router.ready.log, router.ready.http, router.ready.tcp) == (None, None, True)
    assert router.after == ("prefill", "decode")


def test_router_after_given_is_kept() -> None:
    dep = parse_config(BASE + "    after: [prefill]\n")
    assert dep.services["router"].after == ("prefill",)


def test_other_role_checks_tcp_only_when_it_has_a_port() -> None:
    extra = "  a:\n    host: gpu0\n    unit: a\n    port: 9100\n  b:\n    host: gpu0\n    unit: b\n"
    dep = parse_config(BASE + extra)
    assert dep.services["a"].ready.tcp and dep.services["a"].role == "other"
    assert dep.services["b"].ready == dep.services["b"].ready.__class__()
    assert dep.services["a"].after == ()


def test_given_ready_mapping_replaces_defaults_key_by_key() -> None:
    text = BASE.replace("    port: 30000\n", "    port: 30000\n    ready:\n      http: /health_generate\n")
    ready = parse_config(text).services["prefill"].ready
    assert (ready.log, ready.http) == ("fired up and ready", "/health_generate")


def test_ready_log_null_turns_the_log_check_off() -> None:
    text = BASE.replace("    port: 30000\n", "    port: 30000\n    ready: {log: null}\n")
    assert parse_config(text).services["prefill"].ready.log is None


@pytest.mark.parametrize(("service", "seconds"), [("prefill", 360.0), ("decode", 360.0), ("router", 120.0)])
def test_timeout_defaults_by_role(service: str, seconds: float) -> None:
    assert parse_config(BASE).services[service].timeout == seconds


def test_timeout_default_for_other_is_five_minutes() -> None:
    dep = parse_config(BASE + "  x:\n    host: gpu0\n    unit: x\n")
    assert dep.services["x"].timeout == 300.0


def test_stall_after_is_a_duration_and_a_bad_one_is_refused_where_it_is() -> None:
    text = BASE.replace("    port: 30000\n", "    port: 30000\n    stall_after: 90s\n", 1)
    assert parse_config(text).services["prefill"].stall_after == 90.0
    assert parse_config(BASE).services["prefill"].stall_after is None
    bad = BASE.replace("    port: 30000\n", "    port: 30000\n    stall_after: soon\n", 1)
    with pytest.raises(ConfigError, match=r"^<config>:12:18: expected a duration like 90s"):
        parse_config(bad)


def test_unit_gets_service_suffix_once() -> None:
    text = BASE.replace("unit: sglang-decode", "unit: sglang-decode.service")
    dep = parse_config(text)
    assert (dep.services["prefill"].unit, dep.services["decode"].unit) == (
        "sglang-prefill.service",
        "sglang-decode.service",
    )


def test_unit_with_a_dot_in_its_name_still_gets_the_suffix() -> None:
    dep = parse_config(BASE.replace("unit: sglang-prefill", "unit: sglang-v0.4@1"))
    assert dep.services["prefill"].unit == "sglang-v0.4@1.service"


def test_commands_default_to_the_plain_tools() -> None:
    host = parse_config(BASE).hosts["gpu0"]
    assert host.commands == {"systemctl": ("systemctl",), "journalctl": ("journalctl",), "nvidia-smi": ("nvidia-smi",)}
    assert (host.local, host.sudo, host.user, host.port, host.known_hosts) == (False, False, None, None, None)


def test_commands_string_is_split_like_a_shell_and_list_kept() -> None:
    text = BASE.replace(
        "    address: 10.0.0.1\n",
        "    address: 10.0.0.1\n    commands:\n      systemctl: docker exec 'my box' systemctl\n"
        "      journalctl: [sim-journal, --fast]\n",
    )
    commands = parse_config(text).hosts["gpu0"].commands
    assert commands["systemctl"] == ("docker", "exec", "my box", "systemctl")
    assert commands["journalctl"] == ("sim-journal", "--fast")
    assert commands["nvidia-smi"] == ("nvidia-smi",)


def test_local_host_needs_no_address() -> None:
    host = parse_config(BASE.replace("address: 10.0.0.1", "local: true")).hosts["gpu0"]
    assert (host.local, host.address, host.name) == (True, None, "gpu0")


def test_merge_key_values_are_overridden_by_explicit_keys() -> None:
    text = BASE.replace("  decode:\n    host: gpu0\n", "  decode:\n    <<: {host: gpu0, port: 1}\n")
    assert parse_config(text).services["decode"].port == 30002


def test_strict_defaults_to_false_and_can_be_set() -> None:
    assert parse_config(BASE).strict is False
    assert parse_config("strict: true\n" + BASE).strict is True


def test_deployment_is_frozen() -> None:
    dep = parse_config(BASE)
    with pytest.raises(ValidationError):
        dep.name = "other"  # type: ignore[misc]


def test_deployment_can_be_built_from_python_data() -> None:
    dep = Deployment.model_validate(
        {
            "name": "py",
            "hosts": {"h": {"local": True}},
            "services": {"p": {"host": "h", "unit": "p", "role": "prefill", "port": 1}},
        }
    )
    assert (dep.hosts["h"].name, dep.services["p"].name, dep.source) == ("h", "p", "<config>")


# --------------------------------------------------------------------------- durations

@pytest.mark.parametrize(
    ("value", "seconds"),
    [("90s", 90.0), ("6m", 360.0), ("1h", 3600.0), ("1h30m", 5400.0), ("2m30s", 150.0), ("1.5m", 90.0),
     ("45", 45.0), (" 10s ", 10.0), (45, 45.0), (2.5, 2.5), (0, 0.0)],
)
def test_parse_duration_accepts(value: str | float, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value", ["6 minutes", "", "s", "m5", "6M", "1d", "-5s", "1m1h", "inf", "nan", -1, float("inf"), 10**400, True, None,
              [1]]
)
def test_parse_duration_refuses(value: object) -> None:
    with pytest.raises(ValueError, match="expected a duration like 90s, 6m, 1h or a number of seconds"):
        parse_duration(value)  # type: ignore[arg-type]


def test_a_timeout_past_a_floats_range_is_one_line_where_it_is() -> None:
    text = "name: x\nhosts: {h: {local: true}}\nservices:\n  a: {host: h, unit: a, timeout: 1" + "0" * 400 + "}\n"
    with pytest.raises(ConfigError, match=r"^<config>:4:34: expected a duration like 90s"):
        parse_config(text)


# --------------------------------------------------------------------------- levels and dependents

CHAIN = """\
name: chain
hosts: {h: {local: true}}
services:
  cache: {host: h, unit: cache}
  prefill: {host: h, unit: p, role: prefill, port: 1, after: [cache]}
  decode: {host: h, unit: d, role: decode, port: 2}
  router: {host: h, unit: r, role: router, port: 3}
  smoke: {host: h, unit: s, after: [router]}
  metrics: {host: h, unit: m}
"""


def test_levels_follow_after_in_config_order() -> None:
    assert parse_config(CHAIN).levels() == [["cache", "decode", "metrics"], ["prefill"], ["router"], ["smoke"]]


def test_dependents_are_transitive_and_in_bring_up_order() -> None:
    dep = parse_config(CHAIN)
    assert dep.dependents("cache") == ["prefill", "router", "smoke"]
    assert dep.dependents("decode") == ["router", "smoke"]
    assert dep.dependents("metrics") == []


def test_dependents_of_an_unknown_service_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        parse_config(CHAIN).dependents("nope")


def test_first_merged_mapping_wins_over_later_ones() -> None:
    text = BASE.replace("  decode:\n    host: gpu0\n", "  decode:\n    <<: [{host: gpu0, numa: 1}, {numa: 0}]\n")
    assert parse_config(text).services["decode"].numa == 1


@pytest.mark.parametrize("regex", ["(" * 2000 + ")" * 2000, "a{99999999999999999999}"], ids=["deep", "huge-repeat"])
def test_pathological_regex_is_a_config_error(regex: str) -> None:
    error = config_error(BASE.replace("    port: 30000\n", f"    port: 30000\n    fail: ['{regex}']\n"))
    assert (error.line, "expected a valid regular expression" in error.message) == (12, True)


# --------------------------------------------------------------------------- Slurm: clusters and jobs

SLURM = """\
name: dsv4 pd
clusters:
  hpc:
    address: login0
    user: alice
    output_dir: /shared/pdtui/
    partition: gpu
    commands:
      sbatch: env SLURM_CONF=/etc/x.conf sbatch
services:
  prefill:
    cluster: hpc
    role: prefill
    port: 30000
    job: {gpus_per_node: 4, time: 2h, queue_timeout: 20m, mem: 200G, args: [--mail-type=FAIL]}
    launch: {model: m}
  decode:
    cluster: hpc
    role: decode
    port: 30002
    job: {gpus_per_node: 4, nodes: 2, name: my-decode}
    launch: {model: m}
  router:
    cluster: hpc
    role: router
    port: 30001
    launch: {package: smg}
"""


def test_a_deployment_of_jobs_needs_no_hosts() -> None:
    dep = parse_config(SLURM)
    assert dep.hosts == {}
    hpc = dep.clusters["hpc"]
    assert (hpc.address, hpc.user, hpc.local, hpc.output_dir, hpc.partition) == ("login0", "alice", False, "/shared/pdtui", "gpu")
    assert hpc.commands["sbatch"] == ("env", "SLURM_CONF=/etc/x.conf", "sbatch")
    assert hpc.commands["squeue"] == ("squeue",)


def test_a_job_runs_its_commands_under_its_clusters_name_and_has_no_unit() -> None:
    dep = parse_config(SLURM)
    prefill, decode, router = (dep.services[name] for name in ("prefill", "decode", "router"))
    assert (prefill.host, prefill.cluster, prefill.unit, prefill.is_job) == ("hpc", "hpc", None, True)
    assert prefill.job is not None and (prefill.job.gpus_per_node, prefill.job.time, prefill.job.mem) == (4, 7200.0, "200G")
    assert (prefill.queue_timeout, decode.queue_timeout) == (1200.0, decode.timeout)
    assert (prefill.gpu_count, decode.gpu_count, router.gpu_count) == (4, 8, 0)
    assert router.after == ("prefill", "decode") and router.job is not None and router.job.nodes == 1


def test_a_jobs_name_defaults_to_the_deployment_and_the_service() -> None:
    dep = parse_config(SLURM)
    assert [svc.job.name for svc in dep.services.values() if svc.job] == ["dsv4-pd-prefill", "my-decode", "dsv4-pd-router"]


def test_units_and_jobs_side_by_side() -> None:
    text = SLURM.replace("clusters:\n", "hosts:\n  gpu0: {address: 10.0.0.1}\nclusters:\n") + (
        "  other:\n    host: gpu0\n    unit: helper\n    port: 9000\n")
    dep = parse_config(text)
    assert (dep.services["other"].is_job, dep.services["other"].unit) == (False, "helper.service")


def test_the_slurm_sample_loads_with_its_queue_and_start_timeouts() -> None:
    dep = load_config(SAMPLES_DIR / "slurm.yaml")
    prefill = dep.services["prefill"]
    assert (prefill.timeout, prefill.queue_timeout) == (600.0, 1800.0)
    assert prefill.job is not None and prefill.job.setup == ("module load cuda/12.4", "source /shared/venvs/sglang/bin/activate")


def test_a_router_sends_a_canary_every_30s_by_default_and_none_when_off() -> None:
    assert parse_config(BASE).services["router"].canary == 30.0
    assert parse_config(BASE + "    canary: 5s\n").services["router"].canary == 5.0
    for off in ("false", "off", "OFF"):
        assert parse_config(BASE + f"    canary: {off}\n").services["router"].canary is None
    assert parse_config(BASE).services["decode"].canary is None


def test_a_routers_api_key_is_read_from_the_environment_variable_the_config_names(monkeypatch) -> None:
    monkeypatch.setenv("PD_ROUTER_KEY", "s3cret")
    router = parse_config(BASE + "    api_key_env: PD_ROUTER_KEY\n").services["router"]
    assert router.api_key_env == "PD_ROUTER_KEY" and router.api_key == "s3cret"
    assert parse_config(BASE).services["router"].api_key is None


def test_an_api_key_env_not_set_is_one_line_where_it_is_named(monkeypatch) -> None:
    monkeypatch.delenv("PD_ROUTER_KEY", raising=False)
    error = config_error(BASE + "    api_key_env: PD_ROUTER_KEY\n")
    assert str(error) == ("t.yaml:23:18: router 'router': api_key_env names PD_ROUTER_KEY, which is not set in "
                          "pdtui's environment (export the router's API key as PD_ROUTER_KEY)")


def test_an_api_key_env_must_name_a_variable_and_belong_to_a_router(monkeypatch) -> None:
    monkeypatch.setenv("PD_ROUTER_KEY", "s3cret")
    assert "expected the name of an environment variable" in str(config_error(BASE + "    api_key_env: s3cret key\n"))
    decode_keyed = BASE.replace("    port: 30002\n", "    port: 30002\n    api_key_env: PD_ROUTER_KEY\n")
    assert "only a router has an API key" in str(config_error(decode_keyed))


@pytest.fixture
def second_engine(monkeypatch):
    """A second serving engine the config may name, with a ready line of its own: the seam a package fills."""
    from pdtui.config import defaults, fields, schema
    engines = (*defaults.ENGINES, "other")
    monkeypatch.setattr(fields, "ENGINES", engines)
    monkeypatch.setattr(schema, "ENGINES", engines)
    monkeypatch.setitem(defaults.READY_LINES, "other", "Application startup complete")
    return "other"


def test_every_service_runs_the_default_engine_unless_the_config_says():
    deployment = parse_config(BASE)
    assert {svc.engine for svc in deployment.services.values()} == {"sglang"}
    assert deployment.services["decode"].ready.log == "fired up and ready"


def test_the_deployments_engine_is_every_services_and_a_service_may_say_its_own(second_engine):
    text = BASE.replace("name: demo\n", "name: demo\nengine: other\n").replace(
        "    role: prefill\n", "    role: prefill\n    engine: sglang\n")
    deployment = parse_config(text)
    engines = {name: svc.engine for name, svc in deployment.services.items()}
    assert engines == {"prefill": "sglang", "decode": "other", "router": "other"}
    assert deployment.services["decode"].ready.log == "Application startup complete"   # its engine's ready line
    assert deployment.services["prefill"].ready.log == "fired up and ready"
