"""The private one-node Slurm cluster's pytest fixtures (pdtui/sim/slurm_cluster.py), registered by tests/conftest.py.

``slurm_cluster`` starts one cluster for the whole session (its daemons take a
moment) and stops it by PID at the end; ``slurm`` hands it to one test and
cancels every job that test left behind, pass or fail. ``slurm_two_nodes`` is a
cluster of two nodes (two slurmd of this machine), made the same way. Where Slurm is not
installed, or pdtui is not root, they skip saying why.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pdtui.sim.slurm_cluster import ClusterError, PrivateCluster, unavailable

__all__ = ["slurm", "slurm_cluster", "slurm_two_nodes"]


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[PrivateCluster]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    try:
        cluster = PrivateCluster.start()
    except ClusterError as exc:
        pytest.fail(f"the private Slurm cluster did not come up: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: PrivateCluster) -> Iterator[PrivateCluster]:
    try:
        yield slurm_cluster
    finally:
        slurm_cluster.cancel_all()


@pytest.fixture(scope="session")
def slurm_two_node_cluster() -> Iterator[PrivateCluster]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    try:
        cluster = PrivateCluster.start(nodes=2)
    except ClusterError as exc:
        pytest.fail(f"the private two-node Slurm cluster did not come up: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_two_nodes(slurm_two_node_cluster: PrivateCluster) -> Iterator[PrivateCluster]:
    try:
        yield slurm_two_node_cluster
    finally:
        slurm_two_node_cluster.cancel_all()
