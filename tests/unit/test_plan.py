"""The plan `pdtui check` prints: the config restated as the engine will act on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdtui.config import load_config, parse_config
from pdtui.config.fields import format_duration
from pdtui.faces.plan import render_plan

REFERENCE = Path(__file__).parents[2] / "sample_configs" / "reference.yaml"


@pytest.fixture(scope="module")
def reference_plan() -> str:
    return render_plan(load_config(REFERENCE))


def test_plan_starts_with_the_deployment_name_and_source(reference_plan: str) -> None:
    assert reference_plan.splitlines()[0] == f"deployment dsv4-flash-pd  ({REFERENCE})"


def test_plan_lists_hosts_with_user_and_address(reference_plan: str) -> None:
    assert "  gpu0  root@10.1.230.171" in reference_plan.splitlines()


def test_plan_gives_the_bring_up_order_by_level(reference_plan: str) -> None:
    lines = reference_plan.splitlines()
    order = lines[lines.index("bring-up order") + 1 : lines.index("bring-up order") + 3]
    assert order == ["  1. start prefill, decode", "  2. start and enable router, then probe"]


def test_plan_describes_each_service(reference_plan: str) -> None:
    lines = reference_plan.splitlines()
    start = lines.index("  prefill  sglang-dsv4-prefill.service @ gpu0")
    assert lines[start + 1 : start + 8] == [
        "    role        prefill",
        "    GPUs        0-3",
        "    NUMA        0",
        "    port        30000",
        "    ready when  log /fired up and ready/, http /health answers 200",
        "    timeout     6m",
        "    replaces    sglang-dsv4.service (stopped and disabled first)",
    ]
    assert ("    ready when  tcp :30001 accepts, /readiness 200, every backend healthy in /workers, "
            "a model in /v1/models, one chat completion through the router") in lines
    assert "    timeout     2m" in lines


def test_plan_is_plain_text(reference_plan: str) -> None:
    assert "\x1b" not in reference_plan and "[bold" not in reference_plan


def test_plan_shows_local_hosts_port_sudo_and_command_wrappers() -> None:
    dep = parse_config(
        """\
name: mixed
hosts:
  here: {local: true, commands: {systemctl: "sim-systemctl --root /tmp/x"}}
  there: {address: box.example, port: 2222, sudo: true}
services:
  a: {host: here, unit: a, role: prefill, port: 1, gpus: [0, 2, 3, 4, 7]}
  b: {host: there, unit: b, fail: ["boom\\e"], after: [a]}
"""
    )
    lines = render_plan(dep).splitlines()
    assert "  here   local (this machine, no SSH)" in lines
    assert "    systemctl runs as: sim-systemctl --root /tmp/x" in lines
    assert "  there  box.example, port 2222, sudo" in lines
    assert "    GPUs        0, 2-4, 7" in lines
    assert "    ready when  started (no readiness checks)" in lines
    assert "    fails on    /boom␛/ (besides the defaults)" in lines
    assert "  2. start b" in lines


def test_level_with_a_router_and_a_backend_names_both_actions() -> None:
    dep = parse_config(
        """\
name: odd
hosts: {h: {local: true}}
services:
  p: {host: h, unit: p, role: prefill, port: 1}
  r: {host: h, unit: r, role: router, port: 2, after: []}
"""
    )
    assert "  1. start p; start and enable r, then probe" in render_plan(dep).splitlines()


@pytest.mark.parametrize(
    ("seconds", "text"), [(360, "6m"), (120, "2m"), (90, "1m30s"), (5400, "1h30m"), (3600, "1h"), (45, "45s"), (2.5, "2.5s")]
)
def test_format_duration_writes_what_the_config_would(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_plan_of_slurm_jobs_names_the_cluster_each_job_and_its_two_timeouts() -> None:
    plan = render_plan(load_config(Path(__file__).parents[2] / "sample_configs" / "slurm.yaml")).splitlines()
    assert "  hpc  login host alice@login0.hpc.example.org, job output in /shared/pdtui/jobs, partition gpu" in plan
    assert plan[plan.index("bring-up order") + 1:][:2] == ["  1. submit prefill, decode", "  2. submit router, then probe"]
    start = plan.index("  prefill  job dsv4-flash-pd-prefill @ hpc")
    assert plan[start + 4:start + 7] == ["    job         1 node, 4 GPUs each, time limit 12h",
                                         "    timeout     10m from the job's start",
                                         "    queue       may wait 30m for its place"]
