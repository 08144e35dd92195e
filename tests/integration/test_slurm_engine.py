"""The deployment as Slurm jobs on a real (private, one-node) cluster: the reference shape brought up with the sim
workers and the real router, a job that fails, one that never leaves the queue, status, restart and down."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from pdtui.config import Deployment, parse_config
from pdtui.engine.events import JobStatus, StateChanged
from pdtui.engine.intent import Intent, Verb
from pdtui.sim import demo
from pdtui.sim.slurm_cluster import PrivateCluster
from pdtui.targets.slurm.commands import SlurmCommands
from pdtui.targets.slurm.parse import parse_squeue
from tests.engine_helpers import bring_up

STATUS, DOWN = Intent(Verb.STATUS), Intent(Verb.DOWN)
BACKENDS = ("prefill", "decode")


def deployment(cluster: PrivateCluster, router: str = "sim", failures: dict[str, str] | None = None,
               timeout: str = "60s"):
    return demo.build_slurm(cluster, demo.DemoOptions(failures or {}, 0.6, timeout, router=router,
                                                      reference_ports=False))


def jobs(rec) -> dict[str, JobStatus]:
    """Each service's job as last told."""
    return {event.service: event for event in rec.of(JobStatus)}


def live_jobs(cluster: PrivateCluster) -> list[str]:
    names = [f"dsv4-flash-pd-slurm-demo-{name}" for name in ("prefill", "decode", "router")]
    argv = SlurmCommands(squeue=tuple(cluster.commands["squeue"])).queue(names)
    rows = parse_squeue(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    return [row.job_id for row in rows if not row.ended]


async def test_the_reference_shape_comes_up_as_three_jobs_the_router_last_with_the_nodes_urls(slurm, real_router):
    dep = deployment(slurm, real_router)
    done, rec, _ = await bring_up(dep)
    assert done.ok and done.exit_code == 0, done
    for name in BACKENDS:
        assert rec.states(name) == ["starting", "queued", "waiting", "ready"] or \
            rec.states(name) == ["starting", "waiting", "ready"]
        assert rec.index(name, "ready") < rec.index("router", "starting")     # the router's job only after both
    told = jobs(rec)
    assert {told[name].state for name in told} == {"RUNNING"} and len({told[n].job_id for n in told}) == 3
    assert all(told[name].node == slurm.node for name in told)
    gpus = [set(told[name].gpus) for name in BACKENDS]
    assert [len(found) for found in gpus] == [4, 4] and not gpus[0] & gpus[1]
    assert told["router"].gpus == ()
    ready = rec.change("decode", "ready")
    assert (ready.job_id, ready.node) == (told["decode"].job_id, slurm.node)   # state events carry job and node
    script = Path(slurm.jobs_dir, "dsv4-flash-pd-slurm-demo-router.sbatch").read_text()
    for name in BACKENDS:
        assert f"http://127.0.0.1:{dep.services[name].port}" in script          # the node's address (NodeAddr)


async def test_an_out_of_memory_job_fails_naming_its_line_and_blocks_the_router(slurm):
    done, rec, _ = await bring_up(deployment(slurm, failures={"decode": "oom"}))
    assert done.exit_code == 1 and not done.ok
    failed = rec.change("decode", "failed")
    assert failed.reason == "CUDA out of memory" and "torch.OutOfMemoryError" in (failed.line or "")
    assert failed.job_id == jobs(rec)["decode"].job_id
    assert rec.states("router") == ["blocked"]


async def test_a_job_that_never_leaves_the_queue_times_out_naming_slurms_reason_and_a_watch_says_queued(slurm):
    dep = deployment(slurm, failures={"decode": "pending"}, timeout="6s")
    done, rec, _ = await bring_up(dep)
    assert done.exit_code == 1
    assert rec.states("decode") == ["starting", "queued", "timed_out"]
    timed_out = rec.change("decode", "timed_out")
    assert timed_out.reason.startswith("still pending after 6s: Resources (job ")
    assert jobs(rec)["decode"].reason == "Resources"
    assert rec.states("router") == ["blocked"]

    done, rec, _ = await bring_up(dep, intent=STATUS)        # decided at once: it is queued, for Slurm's reason
    assert done.exit_code == 1 and rec.states("decode") == ["queued"]
    queued = rec.change("decode", "queued").reason
    assert queued.startswith("attached: job ") and queued.endswith("pending (Resources)")
    assert done.waiting == ("decode",) and "decode" not in done.failures     # queued: not decided, not failed


def _plain_job(cluster: PrivateCluster, command: list[str], **job) -> Deployment:
    config = {"name": "plain", "clusters": {"c": {"local": True, "output_dir": str(cluster.jobs_dir),
                                                  "commands": cluster.commands}},
              "services": {"decode": {"cluster": "c", "role": "decode", "port": 39999, "timeout": "20s",
                                      "job": {"gpus_per_node": 2, **job},
                                      "launch": {"model": "m", "command": command}}}}
    return parse_config(yaml.safe_dump(config), "plain.yaml")


async def test_a_job_that_ends_without_a_telling_line_fails_in_slurms_words(slurm):
    done, rec, _ = await bring_up(_plain_job(slurm, ["bash", "-c", "echo loading; exit 3"]))
    assert done.exit_code == 1
    reason = rec.change("decode", "failed").reason
    assert reason.startswith("job ") and reason.endswith(" FAILED (NonZeroExitCode), exit code 3")


async def test_a_job_slurm_refuses_fails_with_sbatchs_words(slurm):
    done, rec, _ = await bring_up(_plain_job(slurm, ["true"], partition="nosuch"))
    assert done.exit_code == 1
    assert rec.change("decode", "failed").reason == ("sbatch failed: sbatch: error: Batch job submission failed: "
                                                     "Invalid partition name specified")


async def test_status_restart_and_down_on_slurm(slurm):
    dep = deployment(slurm)
    up, first, _ = await bring_up(dep)
    assert up.ok, up
    ids = {name: status.job_id for name, status in jobs(first).items()}

    done, rec, _ = await bring_up(dep, intent=STATUS)                   # squeue read-only: attached, nothing submitted
    assert done.ok, done
    assert not [e for e in rec.of(StateChanged) if e.new.value in ("starting", "stopping")]
    assert {name: status.job_id for name, status in jobs(rec).items()} == ids
    assert rec.change("decode", "waiting").reason.startswith(f"attached: job {ids['decode']} running on ")

    done, rec, _ = await bring_up(dep, intent=Intent(Verb.RESTART, ("decode",)))   # resubmitted; the router proven again
    assert done.ok, done
    assert jobs(rec)["decode"].job_id not in (ids["decode"], "") and jobs(rec)["router"].job_id == ids["router"]
    assert rec.states("router")[-2:] == ["waiting", "ready"]

    done, rec, _ = await bring_up(dep, intent=DOWN)                     # scancel, the router first
    assert done.ok, done
    assert rec.index("router", "stopped") < rec.index("decode", "stopping")
    assert rec.index("router", "stopped") < rec.index("prefill", "stopping")
    assert rec.change("router", "stopping").reason.endswith("scancel --me --name=dsv4-flash-pd-slurm-demo-router")
    assert live_jobs(slurm) == []

    done, rec, _ = await bring_up(dep, intent=STATUS)
    assert done.exit_code == 1
    for name in dep.services:
        assert rec.states(name) == ["stopped"] and " CANCELLED" in rec.change(name, "stopped").reason
