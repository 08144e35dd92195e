"""Every bench still runs: each is started with --quick (tiny sizes) and must print its JSON figures.

Benchmarks are not tests: nothing here looks at a figure, only at the keys. The
benches run side by side (each stops every process it starts); one that hangs
is stopped by its process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 180

EXPECTED = {
    "readiness": {"pdtui_local", "pdtui_ssh", "loop_20s", "loop_5s", "loop_check_cost", "ratios", "target"},
    "bringup": {"pdtui_local", "pdtui_ssh", "floor_ssh", "beyond_floor", "loop_20s", "loop_5s", "ratios", "target"},
    "throughput": {"ui_alone", "sweep", "highest_ok_lines_per_s", "profile", "rss", "target"},
    "idle": {"tui_ssh", "target"},
    "tui_lines": {"tui_alone"},
    "scale": {"hosts", "services", "overhead_s", "connections_per_host", "target"},
    "startup": {"help", "first_paint"},
    "engine_lines": {"lines", "runs", "lines_per_s"},
    "timeline": {"timeline"},
    "fleet": {"services", "hosts", "bringup_overhead_s", "cpu_s", "engine_cpu_s", "rss_mb", "phases", "target"},
    "attach": {"history_lines", "attach_lines", "runs", "journals"},
    "http_probe": {"pdtui_us_per_request", "httpcore_us_per_request", "ratio"},
    "real_journald": {"runs", "real", "stand-in"},
    "refusal": {"to_finding", "to_done", "command_wall"},
    "preflight": {"preflight_over_ssh", "runs", "sysfs"},
}


pytestmark = pytest.mark.xdist_group("bench_smoke")   # its module fixture once, on one worker


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """Run every bench with --quick at once; name -> (exit status, stdout, stderr).

    Output goes to files, not pipes: a pipe nobody drains yet would block a chatty bench.
    """
    where = tmp_path_factory.mktemp("bench")
    procs = {}
    for name in EXPECTED:
        with open(where / f"{name}.out", "w") as out, open(where / f"{name}.err", "w") as err:
            procs[name] = subprocess.Popen([sys.executable, str(ROOT / "bench" / f"{name}.py"), "--quick"], cwd=ROOT,
                                           stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
    deadline = time.monotonic() + TIMEOUT
    try:
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stop(proc)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                stop(proc)
    return {name: (proc.returncode, (where / f"{name}.out").read_text(), (where / f"{name}.err").read_text())
            for name, proc in procs.items()}


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM first: a bench then stops the sim units it started (they are not in its process group)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bench_prints_its_figures(outputs, name: str) -> None:
    status, out, err = outputs[name]
    assert status == 0, err[-2000:]
    figures = json.loads(out)
    assert EXPECTED[name] <= figures.keys()
    assert {"cpu", "cores", "python", "load_at_start", "load_at_end"} <= figures["machine"].keys()
