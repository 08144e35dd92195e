"""One server over two nodes as one Slurm job, on a private cluster of two nodes: each line labelled with its rank,
ready only once every rank is, a rank's failure named by its rank and node."""

from __future__ import annotations

import pytest

from pdtui.engine.events import JobStatus, LogLines, Notice
from pdtui.sim import demo
from tests.engine_helpers import bring_up


@pytest.fixture
def slurm_two_nodes(slurm_two_node_cluster):
    """The session's two-node cluster, every job a test left behind cancelled, pass or fail."""
    yield slurm_two_node_cluster
    slurm_two_node_cluster.cancel_all()


def two_node_decode(cluster, failures=None, timeout="30s"):
    """The demo's three as jobs, the decode one job over both nodes (``failures`` as ``--fail``)."""
    options = demo.DemoOptions(failures or {}, 0.5, timeout, reference_ports=False, nodes=2)
    return demo.build_slurm(cluster, options)


async def test_a_two_node_decode_job_is_ready_once_both_ranks_are_and_the_router_gets_rank_0(slurm_two_nodes):
    done, rec, _ = await bring_up(two_node_decode(slurm_two_nodes))
    assert done.ok, done
    assert "running on node[1-2] (rank 0 on node1)" in rec.change("decode", "waiting").reason
    running = [e for e in rec.of(JobStatus) if e.service == "decode" and e.state == "RUNNING"][-1]
    assert [node for node, _ in running.nodes] == ["node1", "node2"]
    assert all(gpus for _, gpus in running.nodes), running.nodes     # each node's GPUs, read from scontrol -d
    lines = [r.text for e in rec.of(LogLines) if e.service == "decode" for r in e.lines]
    assert any(line.startswith("1: ") and "Dummy health check server started" in line for line in lines)
    script = next(slurm_two_nodes.jobs_dir.glob("*-router.sbatch")).read_text()
    assert script.count("--decode") == 1


async def test_a_rank_that_crashes_is_named_with_its_node(slurm_two_nodes):
    done, rec, _ = await bring_up(two_node_decode(slurm_two_nodes, {"decode@1": "crash"}))
    assert done.failures["decode"].startswith("rank 1 on node2: "), done.failures
    assert rec.states("router") == ["blocked"]


async def test_rank_0_ready_is_not_enough_while_another_rank_is_not(slurm_two_nodes):
    done, rec, _ = await bring_up(two_node_decode(slurm_two_nodes, {"decode@1": "hang"}, timeout="8s"))
    assert done.failures["decode"] == "not ready after 8s: waiting for rank 1's ready line (its dummy health server)"


async def test_a_rank_that_never_joins_is_named_while_rank_0_waits(slurm_two_nodes):
    done, rec, _ = await bring_up(two_node_decode(slurm_two_nodes, {"decode@1": "hang-dist"}, timeout="6s"))
    told = [n.text for n in rec.of(Notice) if n.service == "decode"]
    assert any(text.startswith("decode: rank 1 on node2: this rank cannot reach the rendezvous") for text in told), told
    assert "stuck in distributed init" in done.failures["decode"]
