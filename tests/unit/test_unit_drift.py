"""Drift between an installed unit and the config: GPUs, NUMA, port, mode, the router's backends."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdtui.config import load_config
from pdtui.support.data import data_dir
from pdtui.targets.systemd.unit_drift import _split, parse_installed, service_drift
from pdtui.targets.systemd.unit_files import render_units

REFERENCE = load_config(data_dir("sample_configs") / "reference.yaml")
GENERATED = {u.service: u.text for u in render_units(REFERENCE)}
WIDE = load_config(data_dir("sample_configs") / "wide-ep.yaml")
WIDE_UNITS = {u.service: u.text for u in render_units(WIDE)}


def drift(service: str, text: str, *extra: str):
    files = [("/etc/systemd/system/x.service", text), *((f"/etc/systemd/system/x.service.d/{i}.conf", t)
                                                        for i, t in enumerate(extra))]
    return service_drift(REFERENCE, REFERENCE.services[service], parse_installed(files))


@pytest.mark.parametrize("service", ["prefill", "decode", "router"])
def test_a_generated_unit_has_no_drift(service):
    assert drift(service, GENERATED[service]) == []


def test_gpus_that_differ_are_an_error_naming_both():
    text = GENERATED["decode"].replace("CUDA_VISIBLE_DEVICES=4,5,6,7", "CUDA_VISIBLE_DEVICES=0,1,2,3")
    [found] = drift("decode", text)
    assert found.level == "error"
    assert found.text == "decode: its unit runs on GPUs 0,1,2,3 (CUDA_VISIBLE_DEVICES), the config says 4-7"


def test_gpus_from_base_gpu_id_and_tp_count_too():
    text = GENERATED["decode"].replace("Environment=CUDA_VISIBLE_DEVICES=4,5,6,7\n", "").replace(
        "--tp 4", "--tp 4 --base-gpu-id 0")
    [found] = drift("decode", text)
    assert found.text.endswith("runs on GPUs 0,1,2,3 (--base-gpu-id and --tp), the config says 4-7")


def test_a_drop_in_overrides_the_unit_file():
    [found] = drift("prefill", GENERATED["prefill"], "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0,1\n")
    assert found.level == "error" and "GPUs 0,1 (CUDA_VISIBLE_DEVICES)" in found.text


def test_numa_that_differs_is_an_error():
    [found] = drift("prefill", GENERATED["prefill"].replace("NUMAMask=0", "NUMAMask=1"))
    assert found.text == "prefill: its unit binds NUMA node 1 (NUMAPolicy=bind NUMAMask=), the config says 0"


def test_numa_by_numactl_is_read():
    text = GENERATED["decode"].replace("ExecStart=", "ExecStart=/usr/bin/numactl --cpunodebind=0 --membind=0 ")
    text = text.replace("NUMAPolicy=bind\nNUMAMask=1\n", "")
    [found] = drift("decode", text)
    assert found.text == "decode: its unit binds NUMA node 0 (numactl), the config says 1"


def test_a_port_that_differs_is_an_error():
    [found] = drift("decode", GENERATED["decode"].replace("--port 30002", "--port 30003"))
    assert found.text == "decode: its unit listens on port 30003 (--port), the config says 30002"


def test_a_router_not_sending_to_a_backend_is_a_note_naming_it_the_api_adds_it():
    [found] = drift("router", GENERATED["router"].replace("--decode http://127.0.0.1:30002", "--decode http://127.0.0.1:30012"))
    assert found.level == "note"
    assert found.text.startswith("router: its unit does not send to decode (its --decode URLs: http://127.0.0.1:30012;")
    assert found.text.endswith("the router gets it through its worker API once decode is ready; its unit lacks it "
                               "until rewritten")


def test_a_unit_that_does_not_say_is_a_note_not_an_error():
    text = ("[Service]\nExecStart=/bin/bash -c 'cd /srv && exec python -m sglang.launch_server "
            "--disaggregation-mode decode --port 30002'\n")
    found = drift("decode", text)
    assert {d.level for d in found} == {"note"} and len(found) == 2     # GPUs and NUMA unsaid


def test_a_server_without_pd_mode_is_an_error():
    found = drift("prefill", GENERATED["prefill"].replace("--disaggregation-mode prefill ", ""))
    assert [d.text for d in found] == ["prefill: its unit runs without --disaggregation-mode (not PD), the config says prefill"]


@given(st.text(alphabet=st.sampled_from(list("ab=-/.,$% \t'\"\\\x1c\u00a0")), max_size=30))
def test_words_are_split_as_the_shell_lexer_splits_them(text: str) -> None:
    """The fast path for plain text answers as shlex does."""
    plain = text.replace("$$", "$").replace("%%", "%")
    try:
        expected = shlex.split(plain)
    except ValueError:
        expected = plain.split()
    assert _split(text) == expected


def wide_drift(service: str, text: str):
    return service_drift(WIDE, WIDE.services[service], parse_installed([("/etc/systemd/system/x.service", text)]))


@pytest.mark.parametrize("service", ["decode", "decode@1", "decode@8", "prefill@3"])
def test_a_generated_rank_unit_has_no_drift(service):
    assert wide_drift(service, WIDE_UNITS[service]) == []


def test_a_unit_that_is_another_rank_is_an_error_naming_both():
    text = WIDE_UNITS["decode@1"].replace("--node-rank 1", "--node-rank 2")
    [found] = wide_drift("decode@1", text)
    assert found.level == "error"
    assert found.text == ("decode@1: its unit runs as rank 2 of 9 nodes (--node-rank, --nnodes), the config says rank 1 "
                          "of 9 nodes")


def test_a_rank_unit_without_the_rank_flags_runs_a_server_of_its_own():
    words = shlex.split(WIDE_UNITS["decode@1"].split("ExecStart=")[1].splitlines()[0])
    at = words.index("--nnodes")
    text = WIDE_UNITS["decode@1"].replace(shlex.join(words[at:at + 6]), "")
    [found] = wide_drift("decode@1", text)
    assert found.text == "decode@1: its unit runs a server of one node (no --nnodes), the config says rank 1 of 9 nodes"


def test_a_unit_of_one_node_run_as_a_rank_is_an_error():
    text = GENERATED["decode"].replace("--tp 4", "--tp 4 --nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.1:5000")
    [found] = drift("decode", text)
    assert found.text == ("decode: its unit runs as rank 0 of 2 nodes (--node-rank, --nnodes), the config says a server "
                          "of one node")


def test_a_rank_that_meets_its_peers_elsewhere_is_an_error():
    address = WIDE.dist_addr(WIDE.services["decode@1"])
    [found] = wide_drift("decode@1", WIDE_UNITS["decode@1"].replace(address, "10.9.9.9:5757"))
    assert found.text == f"decode@1: its unit meets its other ranks at 10.9.9.9:5757 (--dist-init-addr), the config says {address}"
