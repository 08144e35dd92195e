"""Ctrl-C during each step of a headless ``pdtui demo``: exit 130, a summary, no stray process, no torn file.

The demo runs in a sandbox the test names (``--sandbox DIR``, kept after exit), so
that every process it started can be checked by PID from the sandbox's state
files, and every file it wrote can be read back whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SIGINT_IGNORED
from tests.conftest_sim import assert_nothing_left, pdtui_until

REPO = Path(__file__).resolve().parents[2]
STEPS = ["preflight", "start backends", "wait for readiness", "start router", "probe router"]
WAIT = 60


def run_demo_until(sandbox: Path, marker: str, *extra: str, sig: int = signal.SIGINT) -> tuple[int, str, str]:
    """Start the demo, send ``sig`` (SIGINT as Ctrl-C does) to its process group once ``marker`` is printed."""
    return pdtui_until(["demo", "--startup", "2", "--sandbox", str(sandbox), *extra], marker, sig, WAIT)


def assert_files_whole(sandbox: Path) -> None:
    """State files parse, no temporary file is left behind, the journal ends with a whole line."""
    assert not [p.name for p in (sandbox / "state").glob("*.tmp")]
    for path in (sandbox / "state").glob("*.json"):
        json.loads(path.read_text())
    path = sandbox / "journal" / "journal.jsonl"
    journal = path.read_bytes() if path.exists() else b""    # none yet when stopped before any start
    assert journal == b"" or journal.endswith(b"\n")
    for line in journal.splitlines():
        json.loads(line)


@pytest.mark.parametrize("step", STEPS)
def test_ctrl_c_during_each_step_exits_130_with_a_summary_and_leaves_nothing(demo_sandbox, step):
    sandbox = demo_sandbox
    code, out, err = run_demo_until(sandbox, f"▶ {step}", "--headless")
    assert code == 130, out + err
    assert "Traceback" not in err
    summary = next(line for line in err.splitlines() if line.startswith("pdtui: interrupted"))
    assert "commanded" in summary and ("left running" in summary or "left nothing running" in summary)
    assert "pdtui demo: stopped the simulated deployment" in err
    assert_nothing_left(sandbox)
    assert_files_whole(sandbox)


def test_ctrl_c_summary_names_what_was_commanded_while_waiting(demo_sandbox):
    code, out, err = run_demo_until(demo_sandbox, "▶ wait for readiness", "--headless")
    assert code == 130
    summary = next(line for line in err.splitlines() if line.startswith("pdtui: interrupted"))
    assert "during wait for readiness" in summary or "during start backends" in summary
    assert "systemctl start sglang-dsv4-prefill" in summary and "systemctl start sglang-dsv4-decode" in summary
    assert "systemctl start sglang-dsv4-router" not in summary


def test_ctrl_c_with_json_ends_with_one_interrupted_object(demo_sandbox):
    sandbox = demo_sandbox
    code, out, err = run_demo_until(sandbox, '"status":"running"', "--json")
    assert code == 130
    last = json.loads(out.strip().splitlines()[-1])
    assert last["kind"] == "interrupted" and isinstance(last["commanded"], list)
    assert isinstance(last["left_running"], list) and "step" in last
    assert_nothing_left(sandbox)


def test_second_ctrl_c_during_cleanup_still_stops_everything(demo_sandbox):
    sandbox = demo_sandbox
    proc = subprocess.Popen([sys.executable, "-m", "pdtui", "demo", "--headless", "--startup", "2",
                             "--sandbox", str(sandbox)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        for line in proc.stdout:
            if "all ready" in line or "▶ probe router" in line:
                break
        os.killpg(proc.pid, signal.SIGINT)
        while proc.poll() is None:          # keep pressing Ctrl-C while it cleans up
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
        proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # 130, or killed by a SIGINT that came after the cleanup had finished (a shell shows 130 for both).
    assert proc.returncode in (0, 130, -signal.SIGINT)
    assert_nothing_left(sandbox)
    assert_files_whole(sandbox)


def test_a_closed_terminal_stops_the_demo_cleanly(demo_sandbox):
    """SIGHUP (the terminal or tmux pane closed) unwinds like Ctrl-C: nothing the demo started is left."""
    sandbox = demo_sandbox
    code, out, err = run_demo_until(sandbox, "decode   waiting", "--headless", sig=signal.SIGHUP)
    assert code == 130, err
    assert "stopped the simulated deployment" in err
    assert_nothing_left(sandbox)


IGNORING_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                   "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
"""Run the rest of the command line with SIGINT ignored, as a shell runs ``nohup ... &``."""


@pytest.mark.parametrize("workers", ["0", "2"], ids=["one-process", "xdist"])
def test_the_ctrl_c_tests_hold_when_the_suite_runs_with_sigint_ignored(workers):
    """A suite started from a shell that ignores SIGINT: the demos its Ctrl-C tests interrupt still act on it."""
    tests = ["tests/integration/test_cli.py::test_interrupt_exits_130_and_leaves_no_process",
             "tests/integration/test_reliability_interrupts.py::"
             "test_ctrl_c_during_each_step_exits_130_with_a_summary_and_leaves_nothing[wait for readiness]"]
    env = {name: value for name, value in os.environ.items() if name != SIGINT_IGNORED}
    result = subprocess.run([sys.executable, "-c", IGNORING_SIGINT, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-n", workers, *tests], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout[-4000:] + result.stderr[-2000:]
