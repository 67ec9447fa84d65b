"""A real two-node Ray cluster on this host for the distributed tests (started once per session).

`ray.cluster_utils.Cluster` starts a head node and a second node as separate raylet
processes on other ports, so worker placement across nodes is exercised without a second
machine. Logical CPUs are declared (the host has fewer cores): Ray only uses them to place
actors.
"""

from __future__ import annotations

import pytest
import ray


@pytest.fixture(scope="session")
def ray_cluster():
    """Head + one more node, 3 logical CPUs each; the driver is connected to it."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3})
    cluster.add_node(num_cpus=3)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
