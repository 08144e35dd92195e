"""The config's JSON Schema, for editors: made from the models, shipped as they make it, named by every sample, and
of one mind with the loader: a config pdtui loads shows no editor error, a misspelt key or a wrong type does."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pdtui.cli import main
from pdtui.config import ConfigError, parse_config
from pdtui.config import json_schema as js
from pdtui.config.fields import YAML_1_1_FALSE, YAML_1_1_TRUE
from pdtui.support.data import data_dir

TOP = Path(__file__).resolve().parents[2]
SAMPLES_DIR = TOP / "sample_configs"
SAMPLES = sorted(SAMPLES_DIR.glob("*.yaml"))
BAD_CONFIGS = sorted((TOP / "tests" / "configs" / "bad").glob("*.yaml"))
VALIDATOR = jsonschema.Draft202012Validator(js.config_schema())


def sample(name: str) -> dict[str, Any]:
    return yaml.safe_load((SAMPLES_DIR / f"{name}.yaml").read_text())


def schema_accepts(data: Any) -> bool:
    return VALIDATOR.is_valid(data)


def loader_accepts(data: Any) -> bool:
    try:
        parse_config(yaml.safe_dump(data, sort_keys=False))
    except ConfigError:
        return False
    return True


def messages(errors: Any) -> list[str]:
    """Every message of ``errors`` and of the errors under them (an ``anyOf``'s branches)."""
    return [text for error in errors for text in (error.message, *messages(error.context))]


def changed(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``data`` with the value at ``path`` set (a key added where there was none)."""
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


# --------------------------------------------------------------------------- made from the models, shipped as made

def test_the_shipped_schema_is_what_the_models_make_today():
    assert js.shipped_schema() == SAMPLES_DIR / js.SCHEMA_FILE
    assert js.shipped_schema().read_text() == js.schema_text(), "the models changed: run scripts/schema"


def test_the_schema_is_a_draft_2020_12_schema():
    schema = js.config_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_every_mapping_of_the_config_refuses_keys_it_does_not_know():
    schema = js.config_schema()
    objects = [schema, *(d for d in schema["$defs"].values() if "properties" in d),
               *(branch for d in schema["$defs"].values() for branch in d.get("anyOf", ()) if "properties" in branch)]
    assert len(objects) >= 8 and all(o["additionalProperties"] is False for o in objects)


def test_keys_pdtui_fills_itself_are_not_offered():
    schema = js.config_schema()
    assert "source" not in schema["properties"]
    assert all("name" not in schema["$defs"][model]["properties"]
               for model in ("HostConfig", "ClusterConfig", "ServiceConfig"))


def test_the_wheel_ships_the_schema_beside_the_samples():
    pyproject = tomllib.loads((TOP / "pyproject.toml").read_text())
    shipped = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert shipped["sample_configs"] == "pdtui/sample_configs"
    assert (data_dir("sample_configs") / js.SCHEMA_FILE).is_file()


def patterns(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        return {schema["pattern"]} if isinstance(schema.get("pattern"), str) else set().union(
            *map(patterns, schema.values()))
    return set().union(*map(patterns, schema)) if isinstance(schema, list) else set()


PROBES = ["90s", " 6m ", "1h30m", "0s", "0.5", "sglang-decode", "sglang@1.service", "a;b", "-x", "/x", "/x y",
          "/a%j", "a b", "200G", "OFF", "off", "gpu-0", "GPU_0", "_A1", "", " ", "x\\y"]


@pytest.mark.skipif(shutil.which("node") is None, reason="no node: the editor's regular expressions are JavaScript's")
def test_every_pattern_judges_as_an_editors_javascript_would():
    found = sorted(patterns(js.config_schema()))
    script = ("const [ps, probes] = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "console.log(JSON.stringify(ps.map(p => probes.map(s => new RegExp(p, 'u').test(s)))));")
    done = subprocess.run(["node", "-e", script], input=json.dumps([found, PROBES]), capture_output=True, text=True,
                          timeout=60, check=True)
    assert len(found) >= 8
    assert json.loads(done.stdout) == [[re.search(p, s) is not None for s in PROBES] for p in found]


# --------------------------------------------------------------------------- the samples

@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_sample_names_the_schema_beside_it_on_its_first_line(path: Path):
    first = path.read_text().splitlines()[0]
    assert first == js.modeline(js.SCHEMA_FILE)
    assert (path.parent / first.partition("$schema=")[2]).is_file()


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_sample_validates_against_the_schema(path: Path):
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


def test_there_are_samples_of_every_shape():
    assert {"reference", "slurm", "wide-ep", "vllm-pd"} <= {path.stem for path in SAMPLES}


# --------------------------------------------------------------------------- a misspelt key, a wrong type

@pytest.mark.parametrize(("path", "key"), [
    ((), "nmae"),
    (("hosts", "gpu0"), "adress"),
    (("services", "decode"), "gpu"),
    (("services", "decode"), "time_out"),
    (("services", "decode", "ready"), "htp"),
    (("services", "router", "launch"), "polcy"),
    (("hosts", "gpu0", "commands"), "systemd"),
])
def test_a_misspelt_key_is_an_error_in_the_editor_as_in_pdtui(path: tuple[str, ...], key: str):
    data = sample("reference")
    node = data
    for part in path:
        node = node.setdefault(part, {})
    node[key] = "x"
    assert f"'{key}' was unexpected" in " ".join(messages(VALIDATOR.iter_errors(data)))
    assert not loader_accepts(data)


@pytest.mark.parametrize("path", [p for p in BAD_CONFIGS if re.match(r"# expect: \d+:\d+: unknown key ",
                                                                     p.read_text())], ids=lambda p: p.stem)
def test_every_broken_config_of_an_unknown_key_is_a_schema_error(path: Path):
    assert not schema_accepts(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("name", ["host-port-string", "gpus-range-string", "timeout-words", "service-role-typo",
                                  "host-sudo-not-bool", "launch-tp-zero", "job-bad-mem", "top-missing-services",
                                  "service-missing-host", "nodes-one-host", "service-name-spaces", "unit-semicolon"])
def test_a_wrong_type_or_a_missing_key_is_a_schema_error(name: str):
    assert not schema_accepts(yaml.safe_load((TOP / "tests" / "configs" / "bad" / f"{name}.yaml").read_text()))


# --------------------------------------------------------------------------- the loader and the schema agree

ACCEPTED, REFUSED = True, False
DECODE, ROUTER, GPU0 = ("services", "decode"), ("services", "router"), ("hosts", "gpu0")

AGREE = [
    # durations: a number of seconds above zero, or hours, minutes and seconds
    *[("reference", (*DECODE, "timeout"), value, ACCEPTED)
      for value in ["90s", " 90s ", "1h30m", "1.5m", "2m30s", "45", 45, 2.5, "0.5s", "00h01s"]],
    *[("reference", (*DECODE, "timeout"), value, REFUSED)
      for value in ["0s", "0", 0, 0.0, "0h0m", -5, "-5s", "6 minutes", "6M", "1d", "1m1h", "", "s", True, None, [90]]],
    ("reference", (*DECODE, "unhealthy_after"), "2m", ACCEPTED),
    ("reference", (*DECODE, "stall_after"), "90s", ACCEPTED),
    ("reference", (*DECODE, "stall_after"), None, REFUSED),
    # a router's canary: a duration, or false/off for never
    *[("reference", (*ROUTER, "canary"), value, ACCEPTED) for value in ["30s", 45, False, "off", " OFF "]],
    *[("reference", (*ROUTER, "canary"), value, REFUSED) for value in [True, "sometimes", 0, "never", None]],
    # ports and other integers: YAML's integers, never a string of digits or a boolean
    *[("reference", (*DECODE, "port"), value, ACCEPTED) for value in [30002, 65535, 1]],
    *[("reference", (*DECODE, "port"), value, REFUSED) for value in ["30002", 0, 65536, True, -1]],
    ("reference", (*GPU0, "port"), 22, ACCEPTED),
    ("reference", (*GPU0, "port"), "22", REFUSED),
    ("reference", (*DECODE, "numa"), 0, ACCEPTED),
    ("reference", (*DECODE, "numa"), -1, REFUSED),
    ("reference", (*DECODE, "gpus"), [4, 5], ACCEPTED),
    *[("reference", (*DECODE, "gpus"), value, REFUSED) for value in ["4-7", [-1], ["4"], [True], 4]],
    # names, units, roles, engines
    ("reference", (*DECODE, "role"), "Decode", REFUSED),
    ("reference", (*DECODE, "engine"), "sglng", REFUSED),
    ("reference", (*DECODE, "unit"), "sglang-dsv4-decode.service", ACCEPTED),
    *[("reference", (*DECODE, "unit"), value, REFUSED) for value in ["sglang decode", "-x", "a;b", ""]],
    ("reference", (*DECODE, "replaces"), ["old-unit", "older@1"], ACCEPTED),
    ("reference", (*DECODE, "replaces"), "old-unit", REFUSED),
    ("reference", (*ROUTER, "after"), ["decode"], ACCEPTED),
    ("reference", (*ROUTER, "after"), ["de code"], REFUSED),
    ("reference", ("name",), "", REFUSED),
    ("reference", ("strict",), True, ACCEPTED),
    ("reference", ("strict",), "sometimes", REFUSED),
    ("reference", ("services", "the router"), {"host": "gpu0", "unit": "r2", "port": 30009}, REFUSED),
    ("reference", ("services",), {}, REFUSED),
    # readiness checks
    ("reference", (*DECODE, "ready"), {"http": "/health", "log": None}, ACCEPTED),
    *[("reference", (*DECODE, "ready"), value, REFUSED)
      for value in [{"http": "health"}, {"http": "/he alth"}, {"tcp": "sometimes"}, None]],
    # a host
    ("reference", (*GPU0, "sudo"), True, ACCEPTED),
    ("reference", (*GPU0, "unit_dir"), "/opt/units/", ACCEPTED),
    ("reference", (*GPU0, "unit_dir"), "units", REFUSED),
    ("reference", (*GPU0, "address"), "-oProxyCommand=x", REFUSED),
    ("reference", (*GPU0, "address"), "gpu 0", REFUSED),
    *[("reference", (*GPU0, "commands"), value, ACCEPTED)
      for value in [{"systemctl": "sudo -n systemctl"}, {"journalctl": ["ssh", "box", "journalctl"]}]],
    *[("reference", (*GPU0, "commands"), value, REFUSED)
      for value in [{"systemctl": []}, {"systemctl": [3]}, "docker exec box"]],
    # a launch: numbers are written as they read, a command is a string or a list
    ("reference", (*ROUTER, "launch"), {"args": ["--x", 3, 0.5], "env": {"A": 1, "B": "b"}}, ACCEPTED),
    ("reference", (*ROUTER, "launch"), {"command": "python3 -m sglang_router.launch_router"}, ACCEPTED),
    ("reference", (*ROUTER, "launch"), {"command": ["python3", "-m", "x"]}, ACCEPTED),
    *[("reference", (*ROUTER, "launch"), value, REFUSED)
      for value in [{"args": [True]}, {"args": [""]}, {"env": {"A": True}}, {"env": ["A=1"]}, {"command": []},
                    {"package": "sglang_router"}]],
    ("reference", (*DECODE, "launch", "tp"), 0, REFUSED),
    ("reference", (*DECODE, "launch", "transfer_backend"), "nixl", ACCEPTED),
    ("reference", (*DECODE, "launch", "transfer_backend"), "rdma", REFUSED),
    # a server over several nodes: a host's name or a mapping each, two at least
    ("wide-ep", ("services", "prefill", "hosts"), ["p0", {"host": "p1", "port": 30010}, "p2", "p3"], ACCEPTED),
    *[("wide-ep", ("services", "prefill", "hosts"), value, REFUSED)
      for value in [["p0"], "p0", [7, "p1"], ["p0", {"host": "p1", "gpu": [0]}]]],
    # a job
    *[("slurm", ("services", "prefill", "job", "mem"), value, ACCEPTED) for value in ["200G", "0", 0, 200]],
    *[("slurm", ("services", "prefill", "job", "mem"), value, REFUSED) for value in ["200 G", "200GB", -1]],
    ("slurm", ("services", "prefill", "job", "time"), "forever", REFUSED),
    ("slurm", ("services", "prefill", "job", "queue_timeout"), None, ACCEPTED),
    ("slurm", ("services", "prefill", "job", "args"), ["exclusive"], REFUSED),
    ("slurm", ("services", "prefill", "job", "partition"), "gpu a100", REFUSED),
    ("slurm", ("clusters", "hpc", "output_dir"), "/shared/jobs/", ACCEPTED),
    *[("slurm", ("clusters", "hpc", "output_dir"), value, REFUSED) for value in ["/shared/%j", "jobs"]],
]


@pytest.mark.parametrize(("base", "path", "value", "accepted"), AGREE,
                         ids=[f"{'.'.join(p)}={v!r}" for _, p, v, _ in AGREE])
def test_the_loader_and_the_schema_agree(base: str, path: tuple[str, ...], value: Any, accepted: bool):
    data = changed(sample(base), path, value)
    assert (loader_accepts(data), schema_accepts(data)) == (accepted, accepted)


@pytest.mark.parametrize("word", [*YAML_1_1_TRUE, *YAML_1_1_FALSE])
def test_a_yes_or_no_pdtui_reads_as_a_boolean_is_no_error_in_a_yaml_1_2_editor(word: str):
    text = (SAMPLES_DIR / "reference.yaml").read_text().replace("    user: root\n", f"    user: root\n    sudo: {word}\n")
    assert parse_config(text).hosts["gpu0"].sudo is (word in YAML_1_1_TRUE)
    assert schema_accepts(changed(sample("reference"), (*GPU0, "sudo"), word))   # an editor's YAML 1.2 reads a string


@pytest.mark.parametrize("word", YAML_1_1_FALSE)
def test_a_canary_of_no_or_off_is_never_in_pdtui_and_in_the_editor(word: str):
    text = (SAMPLES_DIR / "reference.yaml").read_text().replace("    timeout: 2m\n", f"    timeout: 2m\n    canary: {word}\n")
    assert parse_config(text).services["router"].canary is None
    assert schema_accepts(changed(sample("reference"), (*ROUTER, "canary"), word))


# --------------------------------------------------------------------------- pdtui schema

def test_pdtui_schema_prints_the_schema(capsys):
    assert main(["schema"]) == 0
    out = capsys.readouterr().out
    assert out == js.schema_text() and json.loads(out) == js.config_schema()


def test_pdtui_schema_path_prints_the_installed_file(capsys):
    assert main(["schema", "--path"]) == 0
    assert capsys.readouterr().out == f"{js.shipped_schema()}\n"


def test_pdtui_schema_path_without_the_file_says_so_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(js, "shipped_schema", lambda: tmp_path / js.SCHEMA_FILE)
    assert main(["schema", "--path"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"pdtui: no schema file at {tmp_path / js.SCHEMA_FILE}")
