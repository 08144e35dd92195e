"""Secrets of a config: which values are (marked, or named so), kept out of units, job scripts' modes, what pdtui
prints and what enters the engine (a redactor)."""

from __future__ import annotations

import re
import stat
import time

import pytest
import yaml

from pdtui.commands import units_command as units
from pdtui.config import ConfigError, parse_config
from pdtui.config.secrets import SECRET_WORDS, secret_args, secret_name
from pdtui.engine.events import Done, ProbeResult
from pdtui.engine.orchestrator import Orchestrator
from pdtui.sim.memhost import MemoryFleet
from pdtui.sim.unit_store import parse_unit, read_env_file
from pdtui.support.redact import MASK, Redactor
from pdtui.targets.registry import Registry
from pdtui.targets.systemd.unit_files import env_file_text, render_units
from tests.unit.test_config import SLURM
from tests.unit.test_unit_files import multi_node

TOKEN = "hf_s3cretT0ken$(id)`x`\"q\\b"


def deployment_with(launch: dict, source: str = "mn.yaml"):
    config = multi_node()
    config["services"]["decode-0"]["launch"] = {"model": "m", **launch}
    return parse_config(yaml.safe_dump(config, sort_keys=False), source)


@pytest.mark.parametrize(("name", "secret"), [
    ("HF_TOKEN", True), ("OPENAI_API_KEY", True), ("db_password", True), ("AWS_SECRET_ACCESS_KEY", True),
    ("--api-key", True), ("GIT_CREDENTIALS", True), ("NCCL_DEBUG", False), ("CUDA_VISIBLE_DEVICES", False),
    ("OPENAI_APIKEY", True), ("oauthToken", True), ("--max-total-tokens", False), ("--tokenizer-path", False),
    ("TOKENIZERS_PARALLELISM", False), ("AUTHOR", False), ("--ssl-keyfile", False)])
def test_a_name_that_says_so_names_a_secret(name, secret):
    assert secret_name(name) is secret


def test_secret_flags_give_their_values():
    assert list(secret_args(["--api-key", "k1", "--admin-api-key=k2", "--port", "1", "--api-key"])) == ["k1", "k2"]


def test_a_secret_is_never_in_the_unit_but_in_its_environment_file():
    deployment = deployment_with({"env": {"HF_TOKEN": TOKEN, "PLAIN": "p", "MINE": "mine-secret"},
                                  "secret_env": ["MINE"]})
    unit = next(u for u in render_units(deployment) if u.service == "decode-0")
    assert TOKEN not in unit.text and "mine-secret" not in unit.text and "Environment=PLAIN=p" in unit.text
    assert f"EnvironmentFile=/etc/pdtui/env/{unit.name}.env" in unit.text.splitlines()
    assert unit.secret_path == f"/etc/pdtui/env/{unit.name}.env"
    assert read_env_file_text(unit.secret_text) == {"HF_TOKEN": TOKEN, "MINE": "mine-secret"}


def read_env_file_text(text: str, tmp=None) -> dict[str, str]:
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".env") as file:
        file.write(text)
        file.flush()
        return read_env_file(file.name)


def test_the_sims_systemd_reads_the_environment_file_after_environment(tmp_path):
    path = tmp_path / "u.env"
    path.write_text(env_file_text({"HF_TOKEN": TOKEN, "A": "from-file"}))
    unit = parse_unit("u.service", f"[Service]\nEnvironment=A=inline B=b\nEnvironmentFile={path}\n"
                                   f"EnvironmentFile=-{tmp_path}/missing.env\nExecStart=/bin/true\n")
    assert unit.env == {"A": "inline", "B": "b"}         # the file is read at each start, as systemd reads it
    assert unit.start_env() == {"A": "from-file", "B": "b", "HF_TOKEN": TOKEN}
    path.unlink()
    with pytest.raises(FileNotFoundError):
        unit.start_env()


def test_secret_env_names_a_variable_of_env_or_is_refused_with_its_place():
    with pytest.raises(ConfigError) as caught:
        deployment_with({"env": {"A": "1"}, "secret_env": ["NOPE"]})
    assert re.match(r"mn\.yaml:\d+:\d+: secret_env names NOPE, which is not in launch.env", str(caught.value))


def test_a_flag_that_only_begins_with_a_secret_word_gives_no_secret():
    args = ["--max-total-tokens", "8192", "--tokenizer-path", "/models/tok", "--api-key", "sk-1234"]
    assert list(secret_args(args)) == ["sk-1234"]


def test_an_assignment_to_a_variable_named_as_a_secret_gives_its_value():
    assert list(secret_args(["env", "HF_TOKEN=hf_v1", "PLAIN=p", "python", "x=HF_TOKEN"])) == ["hf_v1"]


def test_a_secret_flag_or_assignment_in_a_launchs_command_is_a_secret(capsys):
    deployment = deployment_with({"command": ["env", "HF_TOKEN=hf_cmdtoken1", "python3", "-m", "sglang.launch_server",
                                              "--api-key", "sk-cmdsecret-999"]})
    assert {"hf_cmdtoken1", "sk-cmdsecret-999"} <= set(deployment.redactor.secrets)
    units.run(deployment)
    out = capsys.readouterr().out
    assert "sk-cmdsecret-999" not in out and "hf_cmdtoken1" not in out and "--api-key <secret>" in out


@pytest.mark.parametrize("launch", [
    {"env": {"HF_TOKEN": "hf_pasted1\r"}},
    {"args": ["--api-key", "sk-pasted1\r"]},
    {"args": ["--api-key=sk-pasted1\r"]},
    {"command": ["python3", "--api-key", "sk-pasted1\n"]},
    {"command": "python3 --api-key sk-pasted1\t"},
])
def test_a_refused_secret_is_not_quoted_in_the_error(launch):
    with pytest.raises(ConfigError) as caught:
        deployment_with(launch)
    assert "pasted1" not in str(caught.value) and "a secret's value (not shown)" in str(caught.value)


def test_units_prints_secrets_masked(capsys):
    deployment = deployment_with({"env": {"HF_TOKEN": TOKEN}, "args": ["--api-key", "sk-argsecret"]})
    units.run(deployment)
    out = capsys.readouterr().out
    assert TOKEN not in out and "sk-argsecret" not in out
    assert "HF_TOKEN=<secret>" in out and "--api-key <secret>" in out


def test_a_secret_quoted_for_the_shell_or_a_unit_is_masked_whole_when_printed(capsys):
    deployment = parse_config(SLURM.replace("launch: {model: m}", "launch: {model: m, env: {HF_TOKEN: \"t$(id)'\\\"x\"}, "
                                            "args: [--api-key, \"k%$'\\\"y\"]}", 1))
    units.run(deployment)
    out = capsys.readouterr().out
    assert "export HF_TOKEN=<secret>\n" in out and "--api-key <secret>" in out, out
    units.run(deployment_with({"args": ["--api-key", "k%$'\"y"]}))
    assert "--api-key \"<secret>\"\n" in capsys.readouterr().out


def test_a_job_scripts_secrets_are_masked_when_printed(capsys):
    deployment = parse_config(SLURM.replace("launch: {model: m}", "launch: {model: m, env: {HF_TOKEN: hf_jobsecret1}}",
                                            1))
    units.run(deployment)
    out = capsys.readouterr().out
    assert "hf_jobsecret1" not in out and "export HF_TOKEN=<secret>" in out


def test_out_writes_units_0644_secrets_0600_and_job_scripts_0700(tmp_path):
    deployment = deployment_with({"env": {"HF_TOKEN": TOKEN}})
    assert units.run(deployment, out=str(tmp_path)) == 0
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    name = next(u.name for u in render_units(deployment) if u.service == "decode-0")
    assert modes[name] == 0o644 and modes[f"{name}.env"] == 0o600
    assert read_env_file(str(tmp_path / f"{name}.env")) == {"HF_TOKEN": TOKEN}
    assert all(TOKEN not in (tmp_path / n).read_text() for n in modes if not n.endswith(".env"))
    jobs = parse_config(SLURM.replace("launch: {model: m}", "launch: {model: m, env: {HF_TOKEN: hf_jobsecret1}}", 1))
    assert units.run(jobs, out=str(tmp_path / "jobs")) == 0
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "jobs").glob("*.sbatch")} == {0o700}


def test_the_redactor_masks_every_secret_and_leaves_other_text_as_it_is():
    redactor = Redactor(["hf_abcdef", "名字秘密xyz", "abc"])     # 'abc': too short to mask
    assert redactor.redact("Grüße 名字秘密xyz, hf_abcdef; hf_abcdefg abc") == "Grüße <secret>, <secret>; <secret>g abc"
    assert redactor.redact("nothing here") == "nothing here"
    assert not Redactor([]) and Redactor([]).redact("hf_abcdef") == "hf_abcdef"


@pytest.mark.parametrize("spelled", [
    "api_key='sk-Ab/c\\'d\\\\e'",                              # a Python repr: quote and backslash escaped
    '{"api_key": "sk-Ab\\/c\'d\\\\e"}',                         # JSON, its solidus escaped too
    '{"api_key": "sk-Ab/c\'d\\\\e"}',
    "GET /v1?key=sk-Ab%2Fc%27d%5Ce HTTP/1.1",                      # percent-encoded in a URL
    "GET /v1?key=sk-ab%2fc%27d%5ce HTTP/1.1",
    "api_key=SK-AB/C'D\\E",                                      # another case
])
def test_the_redactor_masks_a_secret_escaped_encoded_or_in_another_case(spelled):
    secret = "sk-Ab/c'd\\e"
    masked = Redactor([secret]).redact(spelled)
    assert "<secret>" in masked and "sk-" not in masked.lower(), masked


def test_a_boolean_held_by_a_secrets_name_is_never_masked_in_every_line():
    masked = Redactor(["true", "False", "hf_x1234"]).redact("enable_metrics=True, reuse=false, token hf_x1234")
    assert masked == "enable_metrics=True, reuse=false, token <secret>"


def test_the_redactor_keeps_the_places_of_a_text_whose_lower_case_is_longer():
    assert Redactor(["hf_abcdef"]).redact("İİ HF_ABCDEF İ") == "İİ <secret> İ"


@pytest.mark.parametrize(("line", "masked"), [
    ("server_args=ServerArgs(model_path='m', api_key='sk-hand1', admin_api_key=None)",
     "server_args=ServerArgs(model_path='m', api_key='<secret>', admin_api_key=None)"),
    ('{"api_key": "sk-hand2", "max_total_tokens": 8192}', '{"api_key": "<secret>", "max_total_tokens": 8192}'),
    ("args: Namespace(host=None, api_key=['sk-vllm1'], port=8000)", "args: Namespace(host=None, api_key=['<secret>'], port=8000)"),
    ("Environment=HF_TOKEN=hf_old77 \"OPENAI_APIKEY=sk-old\" PLAIN=1",
     "Environment=HF_TOKEN=<secret> \"OPENAI_APIKEY=<secret>\" PLAIN=1"),
    ("ExecStart=/x --api-key sk-old --port 1 --admin-api-key=sk-o2",
     "ExecStart=/x --api-key <secret> --port 1 --admin-api-key=<secret>"),
    ("Authorization: Bearer abc.def", "Authorization: Bearer <secret>"),
    ("GET /v1/models?key=abcd&x=1 HTTP/1.1", "GET /v1/models?key=<secret>&x=1 HTTP/1.1"),
])
def test_a_value_given_to_a_secrets_name_is_masked_though_pdtui_was_never_told_it(line, masked):
    assert Redactor([], SECRET_WORDS).redact(line) == masked


@pytest.mark.parametrize("line", [
    "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, input throughput (token/s): 1.5",
    "--max-total-tokens 8192 --tokenizer-path /models/tok", "api_key=None", "the token is bad, key not found",
])
def test_a_line_that_only_speaks_of_tokens_or_keys_is_left_as_it_is(line):
    assert Redactor([], SECRET_WORDS).redact(line) == line


def test_a_deployments_redactor_holds_its_launches_secrets_and_its_routers_api_key(monkeypatch):
    monkeypatch.setenv("ROUTER_KEY", "router-key-123")
    config = multi_node()
    config["services"]["decode-0"]["launch"] = {"model": "m", "env": {"HF_TOKEN": "hf_tok123"},
                                                "args": ["--api-key=sk-123456"]}
    config["services"]["router"]["api_key_env"] = "ROUTER_KEY"
    deployment = parse_config(yaml.safe_dump(config), "mn.yaml")
    assert set(deployment.redactor.secrets) == {"hf_tok123", "sk-123456", "router-key-123"}


async def test_a_secret_in_an_events_text_is_masked_before_any_face_sees_it():
    deployment = deployment_with({"env": {"HF_TOKEN": "hf_eventSecret1"}})
    orchestrator = Orchestrator(deployment, Registry(MemoryFleet(deployment).host), clock=time.monotonic)
    seen: list = []
    orchestrator.subscribe(seen.append)
    orchestrator.emit(ProbeResult("decode-0", "http /health", False, "HTTP 401: bad token hf_eventSecret1"))
    orchestrator.emit(Done(False, 1, failures={"decode-0": "sbatch: error: key 'hf_eventSecret1' refused"}))
    advice = "HTTP 401: the router requires an API key (its --api-key or --control-plane-api-keys)"
    orchestrator.emit(ProbeResult("router", "workers", False, advice))
    assert seen[0].detail == "HTTP 401: bad token <secret>"
    assert seen[1].failures == {"decode-0": "sbatch: error: key '<secret>' refused"}
    assert seen[2].detail == advice          # pdtui's own words naming a secret's flag: no value to mask


def test_pdtuis_own_words_naming_a_secrets_flag_are_not_masked_in_events_but_a_known_value_is():
    redactor = Redactor(["sk-known-value"], ["api-key", "api_key"])
    advice = "the router requires an API key (its --api-key or --control-plane-api-keys): name its variable"
    assert redactor.redact(advice, by_name=False) == advice
    assert redactor.redact("HTTP 401: bad key sk-known-value", by_name=False) == f"HTTP 401: bad key {MASK}"
    assert redactor.redact("server_args api_key='sk-unknown-one'") == f"server_args api_key='{MASK}'"
