"""pdtui init on the simulated machine: the sim's systemctl and nvidia-smi, through a LocalHost.

The proof that the file is right is the preflight of ``pdtui check --probe``:
a config made from the demo's units finds them, their GPUs, NUMA nodes and
ports, and the preflight reports no drift.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pdtui.commands.init import init
from pdtui.config import load_config
from pdtui.engine.events import Notice
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.hosts.local import LocalHost
from pdtui.sim import demo
from pdtui.sim.sandbox import Sandbox
from pdtui.targets.registry import Registry
from pdtui.targets.systemd.commands import parse_list_unit_files, parse_list_units

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    """A sandbox on the stand-in journal: pdtui init reads no journal, so no journal-remote is started."""
    with Sandbox.create(tmp_path / "sim", real_journal=False) as sandbox:
        yield sandbox


def ctl(sandbox: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sandbox.commands["systemctl"], *args], capture_output=True, text=True, timeout=60)


async def write(sandbox: Sandbox, path: Path, **commands: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await init(path, LocalHost("gpu0"), {**sandbox.commands, **commands}, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_a_config_of_the_demo_units_passes_the_preflight(box, tmp_path):
    made = demo.build(box, demo.DemoOptions({}, router="sim", reference_ports=False))
    path = tmp_path / "pdtui.yaml"
    code, out, _ = await write(box, path)
    assert code == 0 and f"wrote {path}" in out
    # The demo's units name the sim box's NICs: its host is read through the box's sysfs, as the demo's config says.
    doc = yaml.safe_load(path.read_text())
    for host in doc["hosts"].values():
        host["sysfs"] = str(box.root / "sys")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    deployment = load_config(path)
    for name in ("prefill", "decode", "router"):
        want, got = made.services[name], deployment.services[name]
        assert (got.unit, got.gpus, got.numa, got.port) == (want.unit, want.gpus, want.numa, want.port), name
    assert deployment.services["prefill"].bootstrap_port == made.services["prefill"].bootstrap_port
    notices: list[Notice] = []
    orchestrator = Orchestrator(deployment, Registry(make_host))
    orchestrator.subscribe(lambda event: notices.append(event) if isinstance(event, Notice) else None)
    try:
        assert await orchestrator.preflight()
    finally:
        await orchestrator.close()
    assert [n.text for n in notices if n.level != "info"] == []


async def test_a_disabled_unit_never_started_is_found_through_its_file(box, tmp_path):
    box.add_unit("sglang-decode-b", [*SLEEPER, "--disaggregation-mode", "decode", "--port", "31002"])
    listed = ctl(box, "list-units", "--all", "--type=service", "--no-legend", "--plain")
    assert listed.returncode == 0 and parse_list_units(listed.stdout) == []
    code, _, _ = await write(box, tmp_path / "pdtui.yaml")
    decode = load_config(tmp_path / "pdtui.yaml").services["decode"]
    assert code == 0 and (decode.unit, decode.port) == ("sglang-decode-b.service", 31002)


async def test_the_eight_sim_gpus_split_by_numa_node(box, tmp_path):
    await write(box, tmp_path / "pdtui.yaml")
    services = load_config(tmp_path / "pdtui.yaml").services
    assert (services["prefill"].gpus, services["prefill"].numa) == ((0, 1, 2, 3), 0)
    assert (services["decode"].gpus, services["decode"].numa) == ((4, 5, 6, 7), 1)


async def test_without_nvidia_smi_the_gpus_are_an_example_and_said_so(box, tmp_path):
    path = tmp_path / "pdtui.yaml"
    code, out, _ = await write(box, path, **{"nvidia-smi": [str(tmp_path / "no-nvidia-smi")]})
    services = load_config(path).services
    assert code == 0 and (services["prefill"].gpus, services["decode"].gpus) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert services["prefill"].numa is None
    assert "# GPUs: nvidia-smi was not found" in path.read_text() and "nvidia-smi was not found" in out


async def test_without_systemctl_the_default_units_are_written_with_the_reason(box, tmp_path):
    path = tmp_path / "pdtui.yaml"
    code, _, _ = await write(box, path, systemctl=[str(tmp_path / "no-systemctl")])
    units = [svc.unit for svc in load_config(path).services.values()]
    assert code == 0 and units == ["sglang-prefill.service", "sglang-decode.service", "sglang-router.service"]
    assert "systemctl could not list the units" in path.read_text()


async def test_the_wrappers_it_ran_with_are_written_into_the_config(box, tmp_path):
    await write(box, tmp_path / "pdtui.yaml")
    commands = load_config(tmp_path / "pdtui.yaml").hosts["gpu0"].commands
    assert {tool: list(argv) for tool, argv in commands.items()} == box.commands


# --------------------------------------------------------------------------- the sim's listings

def test_plain_list_units_shows_started_and_enabled_units_in_systemd_columns(box):
    box.add_unit("a-run", SLEEPER, description="A runner")
    box.add_unit("b-enabled", SLEEPER)
    box.add_unit("c-untouched", SLEEPER)
    assert ctl(box, "start", "a-run").returncode == 0
    assert ctl(box, "enable", "b-enabled").returncode == 0
    out = ctl(box, "list-units", "--all", "--type=service", "--no-legend", "--plain").stdout
    assert out.splitlines() == ["a-run.service     loaded active   running A runner",
                                "b-enabled.service loaded inactive dead    b-enabled.service"]
    assert [(u.name, u.active) for u in parse_list_units(out)] == [("a-run.service", "active"),
                                                                   ("b-enabled.service", "inactive")]


def test_list_units_without_all_shows_only_running_or_failed_units_and_a_legend(box):
    box.add_unit("a-run", SLEEPER)
    box.add_unit("b-enabled", SLEEPER)
    ctl(box, "start", "a-run")
    ctl(box, "enable", "b-enabled")
    lines = ctl(box, "list-units").stdout.splitlines()
    assert lines[0].split() == ["UNIT", "LOAD", "ACTIVE", "SUB", "DESCRIPTION"] and lines[0].startswith("  UNIT")
    assert lines[1].startswith("  a-run.service") and "b-enabled" not in "\n".join(lines)
    assert "1 loaded units listed. Pass --all to see loaded but inactive units, too." in lines


def test_list_unit_files_lists_every_unit_file_with_its_state(box):
    box.add_unit("a-run", SLEEPER)
    box.add_unit("c-untouched", SLEEPER)
    ctl(box, "enable", "a-run")
    out = ctl(box, "list-unit-files", "--type=service", "--no-legend").stdout
    assert [(u.name, u.file_state) for u in parse_list_unit_files(out)] == [("a-run.service", "enabled"),
                                                                            ("c-untouched.service", "disabled")]
    legend = ctl(box, "list-unit-files").stdout.splitlines()
    assert legend[0].split() == ["UNIT", "FILE", "STATE", "VENDOR", "PRESET"] and legend[-1] == "2 unit files listed."


def test_listings_filter_by_type_and_pattern(box):
    box.add_unit("sglang-x", SLEEPER)
    box.add_unit("other", SLEEPER)
    assert ctl(box, "list-unit-files", "--no-legend", "--type=socket").stdout == ""
    assert ctl(box, "list-unit-files", "--no-legend", "sglang*").stdout.split()[0] == "sglang-x.service"
