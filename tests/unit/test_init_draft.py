"""pdtui init's decisions and the file it writes, pure: unit listings, which unit is which, the GPU split, the YAML."""

import re
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import jsonschema
import pytest
import yaml

from pdtui.commands.init.draft import Draft, make_draft, split_gpus
from pdtui.commands.init.draft_yaml import render
from pdtui.commands.init.survey import FoundUnit, Survey, classify
from pdtui.config import parse_config
from pdtui.config.json_schema import config_schema, modeline, schema_text, shipped_schema
from pdtui.gpus.inventory import Inventory
from pdtui.gpus.nvidia_smi import Gpu
from pdtui.targets.systemd.commands import ListedUnit, parse_list_unit_files, parse_list_units
from pdtui.targets.systemd.unit_drift import parse_installed
from pdtui.targets.systemd.unit_files import render_units


def installed(exec_start: str, *extra: str):
    text = "\n".join(["[Service]", f"ExecStart={exec_start}", *extra]) + "\n"
    return parse_installed([("/etc/systemd/system/x.service", text)])


def h100s(numa: dict[int, int | None]) -> Inventory:
    return Inventory("gpu0", tuple(Gpu(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3") for i in numa), (), numa)


def found(name: str, role: str | None, *, why: str = "runs --disaggregation-mode x", active: str = "active",
          port: int | None = None, gpus: tuple[int, ...] | None = None, numa: int | None = None,
          server: bool = True, bootstrap_port: int | None = None) -> FoundUnit:
    return FoundUnit(name, role, why, active, server, port, bootstrap_port, gpus, numa)


def draft(units=(), inventory=None, commands=None, error=None) -> Draft:
    return make_draft(Survey(tuple(units), inventory, error), "gpu0", commands)


def loads(d: Draft):
    return parse_config(render(d), "pdtui.yaml")


def switched_on(text: str) -> str:
    """Every commented-out key switched on: the ``# `` before an indented ``key:`` removed."""
    return re.sub(r"(?m)^( +)# ( *[a-z][a-z_-]*:(?: |$))", r"\1\2", text)


# --------------------------------------------------------------------------- systemctl listings

def test_plain_list_units_rows_give_name_load_and_active():
    text = ("sglang-prefill.service  loaded    active   running SGLang prefill server\n"
            "auditd.service          not-found inactive dead    auditd.service\n")
    assert parse_list_units(text) == [ListedUnit("sglang-prefill.service", "loaded", "active"),
                                      ListedUnit("auditd.service", "not-found", "inactive")]


def test_list_units_rows_with_the_failed_glyph_and_a_job_column_parse_too():
    text = ("  UNIT  LOAD ACTIVE SUB DESCRIPTION\n"
            "\u25cf sglang-decode.service loaded failed failed SGLang decode\n"
            "  sglang-router.service loaded activating start start SGLang router\n"
            "\n3 loaded units listed.\n")
    assert [(u.name, u.active) for u in parse_list_units(text)] == [
        ("sglang-decode.service", "failed"), ("sglang-router.service", "activating")]


def test_list_unit_files_rows_give_name_and_state():
    text = "UNIT FILE STATE VENDOR PRESET\nsglang@.service static -\nsglang-d.service disabled enabled\n\n2 unit files listed.\n"
    assert parse_list_unit_files(text) == [ListedUnit("sglang@.service", file_state="static"),
                                           ListedUnit("sglang-d.service", file_state="disabled")]


# --------------------------------------------------------------------------- which unit is which

def test_the_disaggregation_mode_tells_the_role_before_the_name():
    unit = classify("sglang-prefill.service", installed(
        "/usr/bin/python3 -m sglang.launch_server --disaggregation-mode decode --port 30002"))
    assert (unit.role, unit.port, unit.server) == ("decode", 30002, True)


def test_gpus_numa_and_bootstrap_port_are_read_from_the_unit():
    unit = classify("pd-p.service", installed(
        "/usr/bin/numactl --cpunodebind=1 --membind=1 python3 -m sglang.launch_server --disaggregation-mode prefill "
        "--disaggregation-bootstrap-port 9000", "Environment=CUDA_VISIBLE_DEVICES=4,5"))
    assert (unit.role, unit.gpus, unit.numa, unit.bootstrap_port, unit.port) == ("prefill", (4, 5), 1, 9000, None)


@pytest.mark.parametrize("exec_start", [
    "/opt/venv/bin/python -m sglang_router.launch_router --pd-disaggregation --port 30001",
    "/usr/bin/python3 -m smg.launch_router --prefill http://127.0.0.1:30000 --decode http://127.0.0.1:30002",
    "/usr/local/bin/smg --pd-disaggregation --port 30001",
])
def test_a_router_is_told_by_its_command_line_whatever_its_name(exec_start):
    unit = classify("frontdoor.service", installed(exec_start))
    assert unit is not None and unit.role == "router" and unit.why == "runs a PD router"


def test_a_unit_named_sglang_with_an_unreadable_command_takes_its_role_from_its_name():
    unit = classify("sglang-dsv4-decode.service", installed("/opt/start.sh"))
    assert (unit.role, unit.why, unit.server) == ("decode", "its name says decode", False)


def test_an_sglang_server_without_a_pd_role_has_no_role():
    unit = classify("sglang-dsv4.service", installed("python3 -m sglang.launch_server --model-path m --port 30000"))
    assert unit.role is None and unit.server and "not PD" in unit.why


def test_a_unit_neither_named_nor_running_sglang_does_not_count():
    assert classify("ssh.service", installed("/usr/sbin/sshd -D")) is None
    assert classify("ssh.service", None) is None


def test_a_unit_named_sglang_whose_files_could_not_be_read_still_counts():
    unit = classify("sglang-router.service", None, "inactive")
    assert (unit.role, unit.active, unit.port) == ("router", "inactive", None)


# --------------------------------------------------------------------------- the GPU split

def test_two_numa_nodes_give_prefill_the_first_and_decode_the_second():
    split = split_gpus(h100s({i: 0 if i < 4 else 1 for i in range(8)}))
    assert split.gpus == {"prefill": (0, 1, 2, 3), "decode": (4, 5, 6, 7)}
    assert split.numa == {"prefill": 0, "decode": 1} and not split.placeholder
    assert split.summary[0] == "nvidia-smi reports 8 GPUs (NVIDIA H100 80GB HBM3): 0-3 on NUMA node 0, 4-7 on NUMA node 1."


def test_interleaved_numa_nodes_split_by_node_not_by_index():
    split = split_gpus(h100s({i: i % 2 for i in range(4)}))
    assert split.gpus == {"prefill": (0, 2), "decode": (1, 3)}


def test_one_numa_node_splits_in_halves_both_on_that_node():
    split = split_gpus(h100s({i: 0 for i in range(4)}))
    assert split.gpus == {"prefill": (0, 1), "decode": (2, 3)} and split.numa == {"prefill": 0, "decode": 0}


def test_unknown_numa_nodes_split_in_halves_with_no_node():
    split = split_gpus(h100s({i: None for i in range(8)}))
    assert split.gpus == {"prefill": (0, 1, 2, 3), "decode": (4, 5, 6, 7)}
    assert split.numa == {"prefill": None, "decode": None}


def test_an_odd_count_gives_prefill_the_larger_half():
    assert split_gpus(h100s({0: 0, 1: 0, 2: 0})).gpus == {"prefill": (0, 1), "decode": (2,)}


def test_gpus_of_a_third_numa_node_are_left_out_and_said_so():
    split = split_gpus(h100s({0: 0, 1: 1, 2: 2}))
    assert split.gpus == {"prefill": (0,), "decode": (1,)}
    assert "NUMA nodes 2 are left out" in " ".join(split.summary)


def test_no_inventory_gives_the_example_split_and_says_nvidia_smi_was_not_found():
    split = split_gpus(None)
    assert split.placeholder and split.gpus == {"prefill": (0, 1, 2, 3), "decode": (4, 5, 6, 7)}
    assert "nvidia-smi was not found" in split.summary[0]


# --------------------------------------------------------------------------- the draft

def test_nothing_found_gives_the_default_units_and_ports():
    services = {svc.role: svc for svc in draft().services}
    assert {role: (svc.unit, svc.port, svc.found) for role, svc in services.items()} == {
        "prefill": ("sglang-prefill", 30000, None), "decode": ("sglang-decode", 30002, None),
        "router": ("sglang-router", 30001, None)}


def test_found_units_give_their_names_ports_and_gpus():
    units = [found("pd-prefill.service", "prefill", port=31000, gpus=(4, 5, 6, 7), numa=1),
             found("pd-decode.service", "decode", port=31002, gpus=(0, 1, 2, 3), numa=0),
             found("pd-router.service", "router", port=8080, server=False)]
    services = {svc.role: svc for svc in draft(units, h100s({i: i // 4 for i in range(8)})).services}
    assert [(s.unit, s.port, s.gpus, s.numa) for s in services.values()] == [
        ("pd-prefill", 31000, (4, 5, 6, 7), 1), ("pd-decode", 31002, (0, 1, 2, 3), 0), ("pd-router", 8080, (), None)]


def test_a_unit_that_names_gpus_but_no_node_takes_the_node_from_the_inventory():
    units = [found("p.service", "prefill", gpus=(4, 5))]
    prefill = draft(units, h100s({i: i // 4 for i in range(8)})).services[0]
    assert (prefill.gpus, prefill.numa) == ((4, 5), 1)


def test_the_split_gives_way_to_the_gpus_a_unit_runs_on():
    units = [found("p.service", "prefill", gpus=(0, 1, 2, 3, 4, 5))]
    prefill, decode, _ = draft(units, h100s({i: i // 4 for i in range(8)})).services
    assert (prefill.gpus, decode.gpus) == ((0, 1, 2, 3, 4, 5), (6, 7))
    assert any("GPUs 4, 5 are the other backend's" in note for note in decode.notes)


def test_a_backend_left_without_gpus_has_no_numa_node_and_a_note():
    decode = draft(inventory=h100s({0: 0})).services[1]
    assert (decode.gpus, decode.numa) == ((), None)
    assert "No GPU is left for it" in decode.notes[0]


def test_two_units_on_the_same_gpus_both_get_the_split_with_a_note():
    units = [found("p.service", "prefill", gpus=(0, 1)), found("d.service", "decode", gpus=(1, 2))]
    prefill, decode, _ = draft(units, h100s({i: i // 4 for i in range(8)})).services
    assert (prefill.gpus, decode.gpus) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert all("overlap" in " ".join(svc.notes) for svc in (prefill, decode))


def test_a_port_another_service_has_moves_to_the_next_free_one_with_a_note():
    units = [found("p.service", "prefill", port=30002)]
    prefill, decode, router = draft(units).services
    assert (prefill.port, decode.port, router.port) == (30002, 30003, 30001)
    assert "Port 30002 is another service's here" in decode.notes[0]


def test_a_port_a_unit_listens_on_is_kept_and_a_default_gives_way():
    units = [found("r.service", "router", port=30000, server=False)]
    prefill, _, router = draft(units).services
    assert (prefill.port, router.port) == (30001, 30000)
    assert prefill.notes == ("Port 30000 is another service's here, so this one says 30001.",)


def test_the_unit_whose_command_line_tells_its_role_is_chosen_over_one_only_named_so():
    units = [found("sglang-prefill.service", "prefill", why="its name says prefill"),
             found("zz-p.service", "prefill")]
    chosen = draft(units)
    assert chosen.services[0].unit == "zz-p"
    assert [u.name for u in chosen.others] == ["sglang-prefill.service"]


def test_a_running_unit_is_chosen_over_an_inactive_one():
    units = [found("a-decode.service", "decode", active="inactive"), found("b-decode.service", "decode")]
    assert draft(units).services[1].unit == "b-decode"


def test_a_server_with_no_pd_role_is_offered_as_a_replaces_candidate():
    units = [found("sglang-dsv4.service", None, why="runs SGLang without --disaggregation-mode (not PD)")]
    chosen = draft(units)
    assert chosen.replaces == ("sglang-dsv4",) and chosen.others == ()
    assert "# replaces: [sglang-dsv4]" in render(chosen)


def test_only_the_wrappers_that_differ_from_the_tools_are_kept():
    commands = {"systemctl": ["systemctl"], "journalctl": ["journalctl"], "nvidia-smi": ["/opt/nv/nvidia-smi"]}
    assert draft(commands=commands).commands == {"nvidia-smi": ("/opt/nv/nvidia-smi",)}


# --------------------------------------------------------------------------- the file

DRAFTS = {
    "nothing found": lambda: draft(),
    "reference machine": lambda: draft(
        [found("sglang-dsv4-prefill.service", "prefill", port=30000, gpus=(0, 1, 2, 3), numa=0, bootstrap_port=8998),
         found("sglang-dsv4-decode.service", "decode", port=30002, gpus=(4, 5, 6, 7), numa=1),
         found("sglang-dsv4-router.service", "router", port=30001, server=False),
         found("sglang-dsv4.service", None, why="runs SGLang without --disaggregation-mode (not PD)")],
        h100s({i: i // 4 for i in range(8)})),
    "one gpu": lambda: draft(inventory=h100s({0: 0})),
    "clashing units": lambda: draft(
        [found("a.service", "prefill", port=30001, gpus=(0, 1)), found("b.service", "decode", port=30001, gpus=(1,)),
         found("c.service", "router", port=30001, server=False)], h100s({0: 0, 1: 0})),
    "no systemctl": lambda: draft(error="local: cannot run systemctl: No such file or directory"),
    "wrappers": lambda: draft(commands={"systemctl": ["env", "A=b c", "/usr/bin/systemctl"],
                                        "nvidia-smi": ["docker", "exec", "gpu", "nvidia-smi"]}),
}


@pytest.mark.parametrize("case", DRAFTS)
def test_the_written_config_loads(case):
    deployment = loads(DRAFTS[case]())
    assert set(deployment.services) == {"prefill", "decode", "router"}
    assert deployment.hosts["gpu0"].local and deployment.services["router"].after == ("prefill", "decode")


@pytest.mark.parametrize("case", DRAFTS)
def test_every_commented_out_key_loads_once_switched_on(case):
    text = switched_on(render(DRAFTS[case]()))
    assert "# launch:" not in text and "# sudo:" not in text
    deployment = parse_config(text, "pdtui.yaml")
    assert deployment.hosts["gpu0"].sudo


@pytest.mark.parametrize("case", DRAFTS)
def test_the_written_config_and_every_key_switched_on_validate_against_the_schema(case):
    validator = jsonschema.Draft202012Validator(config_schema())
    text = render(DRAFTS[case]())
    assert validator.is_valid(yaml.safe_load(text)) and validator.is_valid(yaml.safe_load(switched_on(text)))


def test_the_first_line_names_the_schema_installed_with_pdtui_for_the_editor():
    first = render(draft(), "conf/my pd.yaml").splitlines()[0]
    assert first == modeline(shipped_schema().as_uri())
    uri = first.partition("$schema=")[2]
    assert " " not in uri and Path(url2pathname(urlparse(uri).path)).read_text() == schema_text()


def test_the_written_config_says_what_was_decided():
    deployment = loads(DRAFTS["reference machine"]())
    got = {name: (svc.unit, svc.gpus, svc.numa, svc.port) for name, svc in deployment.services.items()}
    assert got == {"prefill": ("sglang-dsv4-prefill.service", (0, 1, 2, 3), 0, 30000),
                   "decode": ("sglang-dsv4-decode.service", (4, 5, 6, 7), 1, 30002),
                   "router": ("sglang-dsv4-router.service", (), None, 30001)}
    assert deployment.services["prefill"].bootstrap_port == 8998


def test_wrappers_read_back_as_the_same_argv():
    deployment = loads(DRAFTS["wrappers"]())
    commands = deployment.hosts["gpu0"].commands
    assert commands["systemctl"] == ("env", "A=b c", "/usr/bin/systemctl")
    assert commands["nvidia-smi"] == ("docker", "exec", "gpu", "nvidia-smi")
    assert commands["journalctl"] == ("journalctl",)


def test_a_unit_still_to_make_gets_a_launch_block_pdtui_units_can_use():
    text = switched_on(render(draft(inventory=h100s({i: i // 4 for i in range(8)}))))
    units = {unit.name: unit.text for unit in render_units(parse_config(text, "pdtui.yaml"))}
    assert set(units) == {"sglang-prefill.service", "sglang-decode.service", "sglang-router.service"}
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7" in units["sglang-decode.service"]


def test_a_found_unit_gets_no_launch_block():
    text = render(DRAFTS["reference machine"]())
    assert "launch:" not in text.split("\nservices:\n")[1]


def test_every_section_and_key_is_commented():
    text = render(DRAFTS["nothing found"]())
    lines = text.splitlines()
    for section in ("hosts:", "services:"):
        above = lines[:lines.index(section)]
        block = above[max(i for i, line in enumerate(above) if not line.startswith("#")) + 1:]
        assert block and block[0].startswith(f"# {section} ")
    keys = [line for line in text.splitlines() if re.match(r"\s+[a-z_]+: \S", line)]
    assert keys and all(" # " in line for line in keys)


def test_comment_lines_fit_a_terminal():
    text = render(DRAFTS["reference machine"]())
    # The first line is for editors: the schema's path, as long as where pdtui is installed.
    assert max(len(line) for line in text.splitlines()[1:]) <= 100


def test_the_missing_nvidia_smi_is_said_in_the_file():
    text = render(draft())
    assert "# GPUs: nvidia-smi was not found" in text and "gpus: [0, 1, 2, 3]" in text and "gpus: [4, 5, 6, 7]" in text


def test_the_next_steps_name_the_path_written():
    text = render(draft(), "conf/my pd.yaml")
    assert "#   pdtui check conf/my pd.yaml --probe" in text and "#   pdtui up conf/my pd.yaml" in text


@pytest.mark.parametrize("value", ["sglang-prefill", "yes", "8998", "a: b", "#x", "[x]", "/usr/bin/x", "-S", "x,y"])
def test_names_are_written_so_yaml_reads_them_back_unchanged(value):
    from pdtui.commands.init.draft_yaml import _flow, _scalar
    assert yaml.safe_load(f"k: {_scalar(value)}") == {"k": value}
    assert yaml.safe_load(f"k: {_flow([value, 'b'])}") == {"k": [value, "b"]}
