"""``pdtui demo --slurm`` as a user runs it: three jobs brought up in order on a private Slurm cluster, a failed and a
forever-pending job, the JSON contract, and nothing left behind, also when a run goes wrong."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pdtui.cli import main
from pdtui.sim import slurm_cluster as cluster_module
from pdtui.sim.procs import terminate
from pdtui.sim.slurm_cluster import holders

pytestmark = pytest.mark.skipif(bool(cluster_module.unavailable()), reason=cluster_module.unavailable() or "")


@pytest.fixture
def tmpdir_for_demo() -> Iterator[Path]:
    """A folder of our own for the demo's cluster (its TMPDIR): whatever still holds it at the end is stopped.

    Not pytest's tmp_path: munged wants its socket's folders open to all, and pytest's are not.
    """
    folder = Path(tempfile.mkdtemp(prefix="pdtui-test-slurm-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for left in holders(folder):
            terminate(left, 5.0)
        shutil.rmtree(folder, ignore_errors=True)


def demo(folder: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``pdtui demo --slurm ARGS`` with its cluster in ``folder``; a run that hangs is interrupted as a user would."""
    proc = subprocess.Popen([sys.executable, "-m", "pdtui", "demo", "--slurm", "--startup", "0.5", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(folder)})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)       # the demo stops its jobs and its cluster on the way out
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"demo --slurm {' '.join(args)} did not end within {timeout}s: {out[-2000:]}{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def assert_gone(folder: Path) -> None:
    """The demo's cluster is gone: no process holds its folder, and the folder is removed."""
    assert not holders(folder)
    assert not list(folder.glob("pdtui-slurm-*"))


def test_three_jobs_come_up_in_order_and_the_cluster_is_gone_after(tmpdir_for_demo: Path) -> None:
    result = demo(tmpdir_for_demo, "--headless")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert ": 3 services on 1 Slurm cluster" in out and "✓ all ready in " in out
    for backend in ("prefill", "decode"):
        assert f"{backend:<8} queued    submitted: job " in out or f"{backend:<8} waiting   submitted: job " in out
        assert out.index("router   starting  sbatch ") > out.index(f"{backend:<8} READY")
    assert "GPUs 0-3" in out and "GPUs 4-7" in out
    assert "a private Slurm cluster runs the jobs (node " in result.stderr
    assert result.stderr.rstrip().endswith("pdtui demo: cancelled its jobs and stopped its private Slurm cluster")
    assert_gone(tmpdir_for_demo)


def test_an_out_of_memory_decode_exits_1_naming_decode(tmpdir_for_demo: Path) -> None:
    result = demo(tmpdir_for_demo, "--headless", "--fail", "decode:oom")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "decode   FAILED    CUDA out of memory" in result.stdout
    assert "router   blocked   decode failed" in result.stdout and "router   starting" not in result.stdout
    assert_gone(tmpdir_for_demo)


def test_a_job_that_never_leaves_the_queue_times_out_with_slurms_reason(tmpdir_for_demo: Path) -> None:
    result = demo(tmpdir_for_demo, "--headless", "--fail", "decode:pending", "--timeout", "6s")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "decode   TIMED OUT still pending after 6s: Resources (job " in result.stdout
    assert_gone(tmpdir_for_demo)


def test_the_json_lines_carry_each_jobs_id_and_node(tmpdir_for_demo: Path) -> None:
    result = demo(tmpdir_for_demo, "--json")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    ready = {e["service"]: e for e in events if e["kind"] == "state" and e["state"] == "ready"}
    jobs = {e["service"]: e for e in events if e["kind"] == "job"}
    assert set(ready) == {"prefill", "decode", "router"}
    assert all(ready[name]["job_id"] == jobs[name]["job_id"] and ready[name]["node"] for name in ready)
    assert sorted(jobs["prefill"]["gpus"] + jobs["decode"]["gpus"]) == list(range(8))
    assert events[-1]["kind"] == "done" and events[-1]["ok"] is True
    assert result.stderr == ""                   # --json: stdout is the contract, and nothing else is said
    assert_gone(tmpdir_for_demo)


def test_without_root_the_demo_says_why_in_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["demo", "--slurm", "--headless"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == ("pdtui: demo --slurm: a private Slurm cluster needs root (slurmd runs jobs as their user; "
                       "its GPU files need mknod)")


def test_the_queue_failure_mode_needs_slurm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--headless", "--fail", "decode:pending"]) == 2
    assert "MODE one of oom, nccl" in capsys.readouterr().err
