"""The demo's load: started with the demo, served through its router by both workers, stopped when it ends."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from pdtui.sim.sandbox import Sandbox
from tests.conftest_sim import assert_nothing_left, fetch, wait_until
from tests.web_helpers import Served


def served_requests(sandbox: Path, service: str) -> float:
    """``sglang:num_requests_total`` of one of the demo's workers (0 while it serves no /metrics)."""
    port = yaml.safe_load((sandbox / "demo.yaml").read_text())["services"][service]["port"]
    code, body = fetch(f"http://127.0.0.1:{port}/metrics")
    if code != 200:
        return 0.0
    return next(s.value for family in text_string_to_metric_families(body.decode()) for s in family.samples
                if s.name == "sglang:num_requests_total")


def load_log(sandbox: Path) -> str:
    path = sandbox / "load.log"
    return path.read_text() if path.exists() else ""


def test_a_running_demo_serves_its_load_through_the_router_and_stops_it_on_ctrl_c(tmp_path):
    sandbox = tmp_path / "sim"
    with Served(["demo", "--web", "--router", "sim", "--startup", "1"], tmp_path, sandbox) as served:
        wait_until(lambda: "answers: sending" in load_log(sandbox), timeout=60, interval=0.2)
        wait_until(lambda: served_requests(sandbox, "decode") > 0 and served_requests(sandbox, "prefill") > 0)
        [load] = Sandbox(sandbox).spawned().values()
        assert load.alive()
        assert served.stop(signal.SIGINT) == 0
    assert "pdtui demo: a light load runs through the router" in served.stderr()
    assert not load.alive() and " load: stopped: " in load_log(sandbox).splitlines()[-1]
    assert_nothing_left(sandbox)


@pytest.mark.parametrize("flags, spawned", [((), ["load"]), (("--no-load",), [])])
def test_a_headless_demo_stops_its_load_when_it_ends_and_no_load_starts_none(tmp_path, flags, spawned):
    sandbox = tmp_path / "sb"
    result = subprocess.run([sys.executable, "-m", "pdtui", "demo", "--headless", "--startup", "0.5", "--router", "sim",
                             "--sandbox", str(sandbox), *flags], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(Sandbox(sandbox).spawned()) == spawned
    assert ("a light load runs" in result.stderr) == bool(spawned)
    if spawned:
        assert " load: stopped: " in load_log(sandbox).splitlines()[-1]   # asked to stop, not killed
    assert_nothing_left(sandbox)

