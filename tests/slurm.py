"""The private one-node Slurm cluster's pytest fixtures (pdtui/sim/slurm_cluster.py), registered by tests/conftest.py.

``slurm_cluster`` starts one cluster for the whole session (its daemons take a
moment) and stops it by PID at the end; ``slurm`` hands it to one test and
cancels every job that test left behind, pass or fail. ``slurm_two_node_cluster`` is a
cluster of two nodes (two slurmd of this machine), made the same way. Where Slurm is not
installed, or pdtui is not root, they skip saying why.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pdtui.sim.slurm_cluster import ClusterError, PrivateCluster, unavailable

__all__ = ["slurm", "slurm_cluster", "slurm_two_node_cluster"]


def _cluster(nodes: int) -> Iterator[PrivateCluster]:
    """A private cluster of ``nodes`` nodes for the session, stopped by PID at its end; a skip saying why where
    Slurm cannot run here."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    try:
        cluster = PrivateCluster.start(nodes=nodes)
    except ClusterError as exc:
        pytest.fail(f"the private Slurm cluster ({nodes} node(s)) did not come up: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def _each_test(cluster: PrivateCluster) -> Iterator[PrivateCluster]:
    """The cluster for one test: every job it left behind cancelled, pass or fail."""
    try:
        yield cluster
    finally:
        cluster.cancel_all()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[PrivateCluster]:
    yield from _cluster(1)


@pytest.fixture
def slurm(slurm_cluster: PrivateCluster) -> Iterator[PrivateCluster]:
    yield from _each_test(slurm_cluster)


@pytest.fixture(scope="session")
def slurm_two_node_cluster() -> Iterator[PrivateCluster]:
    yield from _cluster(2)
