"""Ray's side of placement: live nodes, the head node, each node's data directory, pinning options.

A node is identified by its Ray node id. Ray gives a node that restarts a
new id, so a lost node never comes back as itself: its replicas are moved to
other nodes (controller.py, ClusterConfig.replica_reassign_after_ms) rather
than waited for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

HEAD_RESOURCE = "node:__internal_head__"
"""The resource Ray gives its head node only."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: str
    address: str
    is_head: bool


def alive_nodes() -> list[NodeInfo]:
    return [NodeInfo(n["NodeID"], n.get("NodeManagerAddress", ""), HEAD_RESOURCE in n.get("Resources", {}))
            for n in ray.nodes() if n.get("Alive")]


def head_node_id() -> str:
    for node in alive_nodes():
        if node.is_head:
            return node.node_id
    return ray.get_runtime_context().get_node_id()


def node_data_dir(data_root: str, node_id: str) -> str:
    """The directory partitions on ``node_id`` live under: one per node, so simulated nodes
    sharing a machine never share files."""
    return os.path.join(os.path.expanduser(data_root), f"node-{node_id[:16]}")


def pinned(node_id: str, soft: bool = False) -> NodeAffinitySchedulingStrategy:
    """Hard affinity: the actor runs on this node or not at all (its data is on this disk)."""
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


def replica_actor_options(node_id: str, name: str, namespace: str, max_restarts: int) -> dict:
    """Options for a replica actor: pinned, detached (it must outlive the controller that made it),
    restarted on its node after a crash, and num_cpus=0 so many fit on a node."""
    return {
        "name": name,
        "namespace": namespace,
        "lifetime": "detached",
        "num_cpus": 0,
        "max_restarts": max_restarts,
        "max_task_retries": 0,
        "max_concurrency": 1000,
        "scheduling_strategy": pinned(node_id),
    }
