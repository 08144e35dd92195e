"""The private one-node Slurm cluster (pdtui/sim/slurm_cluster.py): it runs jobs on the GPUs it names, and stopping
it leaves no process and no folder behind."""

from __future__ import annotations

import os

import pytest

from pdtui.sim import slurm_cluster as cluster_module
from pdtui.sim.slurm_cluster import ClusterUnavailable, PrivateCluster, holders
from tests.conftest_sim import gone, wait_until


def submit(cluster: PrivateCluster, body: str, *options: str) -> str:
    script = cluster.jobs_dir / "probe.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    result = cluster.client("sbatch", "--parsable", f"--output={cluster.jobs_dir}/%x-%j.out", *options, str(script))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def state(cluster: PrivateCluster, job: str) -> str:
    return cluster.client("squeue", "-h", "--states=all", "-j", job, "-o", "%T").stdout.strip()


def test_a_job_runs_on_the_gpus_slurm_gave_it(slurm: PrivateCluster) -> None:
    job = submit(slurm, 'echo "gpus=$CUDA_VISIBLE_DEVICES"', "--gres=gpu:4")
    wait_until(lambda: state(slurm, job) == "COMPLETED")
    assert (slurm.jobs_dir / f"probe.sh-{job}.out").read_text().strip() == "gpus=0,1,2,3"


def test_gpus_are_not_shared_a_job_asking_for_taken_ones_waits(slurm: PrivateCluster) -> None:
    first = submit(slurm, "sleep 60", "--gres=gpu:6")
    wait_until(lambda: state(slurm, first) == "RUNNING")
    second = submit(slurm, "true", "--gres=gpu:4")
    wait_until(lambda: slurm.client("squeue", "-h", "-j", second, "-o", "%T %r").stdout.split() == ["PENDING", "Resources"])


def test_stopping_cancels_the_jobs_and_ends_every_process_it_started() -> None:
    reason = cluster_module.unavailable()
    if reason:
        pytest.skip(reason)
    cluster = PrivateCluster.start()
    try:
        daemons = cluster.pids
        assert len(daemons) == 3
        job = submit(cluster, "trap '' TERM; sleep 300", "--gres=gpu:2")   # one that will not go quietly
        wait_until(lambda: state(cluster, job) == "RUNNING")
        assert holders(cluster.root), "a running job holds the cluster's folder"
    finally:
        cluster.stop()
    assert all(gone(pid) for pid in daemons)
    assert not holders(cluster.root)
    assert not cluster.root.exists()


def test_without_root_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "program", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterUnavailable, match="needs root"):
        PrivateCluster.start()


def test_without_slurm_it_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "program", lambda name: None if name in ("slurmd", "munged") else name)
    assert cluster_module.unavailable() == ("Slurm is not installed here (munged, slurmd missing): apt-get install "
                                            "slurmctld slurmd slurm-client munge")
