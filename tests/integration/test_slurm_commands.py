"""pdtui's Slurm argv (pdtui/targets/slurm/commands.py) run against a real cluster, and what it printed read by
pdtui/targets/slurm/parse.py: the formats of tests/unit/test_slurm_parse.py, as this Slurm prints them."""

from __future__ import annotations

import stat
import subprocess

from pdtui.sim.slurm_cluster import PrivateCluster
from pdtui.targets.slurm.commands import SlurmCommands
from pdtui.targets.slurm.parse import JobRow, accounting_off, parse_job, parse_node, parse_sacct, parse_squeue, parse_submitted
from pdtui.targets.slurm.script import output_path, sbatch_quoted
from tests.conftest_sim import wait_until


def commands(cluster: PrivateCluster) -> SlurmCommands:
    return SlurmCommands(*(tuple(cluster.commands[name]) for name in ("sbatch", "squeue", "sacct", "scontrol", "scancel")))


def run(argv: list[str], input: bytes | None = None) -> subprocess.CompletedProcess[str]:
    stdin = {"input": input.decode()} if input is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, **stdin)  # type: ignore[call-overload]


def submit(cluster: PrivateCluster, name: str, body: str, *options: str) -> subprocess.CompletedProcess[str]:
    script = "\n".join(["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --output={cluster.jobs_dir}/%x-%j.out",
                        *(f"#SBATCH {option}" for option in options), body, ""])
    submission = commands(cluster).submit(str(cluster.jobs_dir), str(cluster.jobs_dir / f"{name}.sbatch"), script)
    return run(submission.argv, submission.input)


def job_id(result: subprocess.CompletedProcess[str]) -> str:
    found = parse_submitted(result.stdout)
    assert found, result.stderr
    return found


def row(cluster: PrivateCluster, name: str) -> JobRow | None:
    rows = parse_squeue(run(commands(cluster).queue([name])).stdout)
    return rows[-1] if rows else None


def test_a_running_job_its_node_and_its_gpus(slurm: PrivateCluster) -> None:
    job = job_id(submit(slurm, "t-run", "sleep 60", "--gres=gpu:4"))
    running = wait_until(lambda: (r := row(slurm, "t-run")) and r.running and r)
    assert (running.job_id, running.state, running.nodes, running.name) == (job, "RUNNING", slurm.node, "t-run")
    detail = parse_job(run(commands(slurm).show_job(job)).stdout)
    assert detail is not None
    assert (detail.job_id, detail.state, detail.batch_host, detail.nodes) == (job, "RUNNING", slurm.node, slurm.node)
    assert detail.gpu_indices == (0, 1, 2, 3)
    node = parse_node(run(commands(slurm).show_node(slurm.node)).stdout)
    assert node["NodeAddr"] == "127.0.0.1"
    assert run(commands(slurm).cancel_named("t-run")).returncode == 0
    assert wait_until(lambda: (r := row(slurm, "t-run")) and r.ended and r).state == "CANCELLED"


def test_a_job_waiting_for_gpus_says_resources(slurm: PrivateCluster) -> None:
    job_id(submit(slurm, "t-hold", "sleep 60", "--gres=gpu:6"))
    wait_until(lambda: (r := row(slurm, "t-hold")) and r.running)
    waiting = job_id(submit(slurm, "t-wait", "true", "--gres=gpu:4"))
    pending = wait_until(lambda: (r := row(slurm, "t-wait")) and r.reason and r)
    assert (pending.job_id, pending.state, pending.reason, pending.nodes) == (waiting, "PENDING", "Resources", "")


def test_a_failed_job_its_state_reason_and_exit_code(slurm: PrivateCluster) -> None:
    job = job_id(submit(slurm, "t-fail", "exit 3"))
    ended = wait_until(lambda: (r := row(slurm, "t-fail")) and r.ended and r)
    assert (ended.state, ended.reason) == ("FAILED", "NonZeroExitCode")
    detail = parse_job(run(commands(slurm).show_job(job)).stdout)
    assert detail is not None and (detail.state, detail.exit_code) == ("FAILED", "3:0")


def test_asking_for_more_gpus_than_the_cluster_has_is_refused_at_submission(slurm: PrivateCluster) -> None:
    result = submit(slurm, "t-huge", "true", "--gres=gpu:16")
    assert parse_submitted(result.stdout) is None
    assert "Requested node configuration is not available" in result.stderr


def test_sacct_without_accounting_says_so_and_lists_nothing(slurm: PrivateCluster) -> None:
    result = run(commands(slurm).accounting(["t-run"]))
    assert accounting_off(result.stderr)
    assert parse_sacct(result.stdout) == []


def test_an_unknown_job(slurm: PrivateCluster) -> None:
    assert parse_job(run(commands(slurm).show_job("999999")).stdout) is None


def test_an_output_folder_with_a_blank_and_a_hash_gets_the_jobs_output_where_pdtui_follows_it(slurm) -> None:
    """The quoted --output directive as this sbatch reads it: one word, its blank and '#' kept."""
    folder = slurm.jobs_dir / "pd jobs #1"
    script = "\n".join(["#!/bin/bash", "#SBATCH --job-name=t-blank",
                        f"#SBATCH --output={sbatch_quoted(output_path(str(folder), '%x', '%j'))}",
                        "echo from-the-job", ""])
    submission = commands(slurm).submit(str(folder), str(folder / "t-blank.sbatch"), script)
    job = job_id(run(submission.argv, submission.input))
    out = folder / f"t-blank-{job}.out"
    assert wait_until(lambda: out.exists() and "from-the-job" in out.read_text())
    assert sorted(p.name for p in folder.iterdir()) == sorted([out.name, "t-blank.sbatch"])


def test_a_jobs_output_file_is_its_owners_alone(slurm) -> None:
    """SGLang prints its server_args (an --api-key among them) into the job's output: sbatch runs under the submit
    script's umask 077, and Slurm creates the output file with the umask the job was submitted under."""
    job = job_id(submit(slurm, "t-private", "echo from-the-job"))
    out = slurm.jobs_dir / f"t-private-{job}.out"
    assert wait_until(lambda: out.exists() and "from-the-job" in out.read_text())
    assert stat.S_IMODE(out.stat().st_mode) & 0o077 == 0, oct(out.stat().st_mode)
