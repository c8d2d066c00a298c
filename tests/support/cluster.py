"""Simulated multi-node Ray clusters for tests (ray.cluster_utils.Cluster), always shut down.

Each simulated node is a raylet of its own on this machine, with its own node id, so raylog
gives it its own data directory under the data root. Ray's health checks are sped up so a
removed node is declared dead in about 2 s instead of 15.
"""

from __future__ import annotations

import contextlib
import time

import ray
from ray.cluster_utils import Cluster

import raylog
from placement.nodes import HEAD_RESOURCE
from raylog.cluster import RAY_SYSTEM_CONFIG

FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024, "node_ip_address": "127.0.0.1"}
"""Every simulated node on loopback: without node_ip_address, ray.cluster_utils binds the machine's
address and all interfaces (seen with ss), whatever RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER says. (A
client must then also keep 127.0.0.1: tests/conftest.py sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
before Ray is imported, or Ray rewrites it to the machine's address.)"""


class SimulatedCluster:
    def __init__(self, sim: Cluster, cluster: raylog.Cluster):
        self.sim = sim
        self.cluster = cluster

    def node_ids(self) -> list[str]:
        return [n["NodeID"] for n in ray.nodes() if n["Alive"]]

    def head_id(self) -> str:
        return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and HEAD_RESOURCE in n["Resources"])

    def remove(self, node_id: str) -> None:
        """Kill the node's raylet and everything on it, as a lost machine would."""
        assert node_id != self.head_id(), "removing the head ends the cluster"
        node = next(n for n in self.sim.list_all_nodes() if n.node_id == node_id)
        self.sim.remove_node(node, allow_graceful=False)

    def add(self) -> str:
        before = set(self.node_ids())
        self.sim.add_node(**NODE_ARGS)
        self.sim.wait_for_nodes()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = set(self.node_ids()) - before
            if new:
                return new.pop()
            time.sleep(0.2)
        raise AssertionError("the added node never came up")


@contextlib.contextmanager
def simulated_cluster(data_root: str, workers: int = 3, cluster_config: dict | None = None,
                      log_to_driver: bool = True, head_resources: dict | None = None, head_cpus: int = 1):
    """``head_resources``: custom resources of the head node only (to pin something there), which
    has ``head_cpus`` CPUs."""
    sim = Cluster(initialize_head=True,
                  head_node_args={**NODE_ARGS, "num_cpus": head_cpus, "resources": head_resources or {},
                                  "_system_config": {**FAST_HEALTH_CHECKS, **RAY_SYSTEM_CONFIG}})
    try:
        for _ in range(workers):
            sim.add_node(**NODE_ARGS)
        sim.wait_for_nodes()
        cluster = raylog.connect(address=sim.address, data_root=data_root, cluster_config=cluster_config,
                                 log_to_driver=log_to_driver)
        yield SimulatedCluster(sim, cluster)
    finally:
        ray.shutdown()
        try:
            sim.shutdown()
        except ValueError:
            # A client thread (a producer left open by a failed test) re-attached Ray after the
            # shutdown above; detach again so the simulated nodes can be stopped.
            ray.shutdown()
            sim.shutdown()
