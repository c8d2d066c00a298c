"""Ray's side of placement: live Ray nodes, the head, where a node's data directory is, pinning options.

A raylog node is its data directory (raylog/storage/node_directory.py): the directory's
meta.properties holds the raylog node id, which never changes. A Ray node id lives one Ray session
only, so it says where a raylog node runs *now*: the controller maps each raylog node id to the Ray
node it runs on this session, and pins that node's replicas there.

Where a Ray node's data directory is, in order:

1. its Ray node label ``raylog.io/data-dir`` (``ray start --labels='{"raylog.io/data-dir":
   "/mnt/raylog"}'``, or ``labels=`` of ray.cluster_utils' ``add_node``): a node with its own
   volume, or one of several simulated nodes on one machine;
2. ``RAYLOG_DATA_DIR`` in the node's environment (Ray's workers inherit the raylet's);
3. the cluster's data root (ClusterConfig.data_root), the same path on every machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

HEAD_RESOURCE = "node:__internal_head__"
"""The resource Ray gives its head node only."""
DATA_DIR_LABEL = "raylog.io/data-dir"
DATA_DIR_ENV = "RAYLOG_DATA_DIR"


@dataclass(frozen=True, slots=True)
class RayNode:
    """A live Ray node, this session."""

    ray_node_id: str
    address: str
    is_head: bool


def alive_nodes() -> list[RayNode]:
    return [RayNode(n["NodeID"], n.get("NodeManagerAddress", ""), HEAD_RESOURCE in n.get("Resources", {}))
            for n in ray.nodes() if n.get("Alive")]


def head_ray_node_id() -> str:
    for node in alive_nodes():
        if node.is_head:
            return node.ray_node_id
    return ray.get_runtime_context().get_node_id()


def own_data_dir(data_root: str) -> str:
    """This process's node's data directory (see the module doc), as an absolute path."""
    labels = ray.get_runtime_context().get_node_labels() if ray.is_initialized() else {}
    chosen = labels.get(DATA_DIR_LABEL) or os.environ.get(DATA_DIR_ENV) or data_root
    return os.path.abspath(os.path.expanduser(chosen))


def pinned(ray_node_id: str, soft: bool = False) -> NodeAffinitySchedulingStrategy:
    """Hard affinity: the actor runs on this Ray node or not at all (its data is on this disk)."""
    return NodeAffinitySchedulingStrategy(node_id=ray_node_id, soft=soft)


def replica_actor_options(ray_node_id: str, name: str, namespace: str, max_restarts: int) -> dict:
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
        "scheduling_strategy": pinned(ray_node_id),
    }


def own_address() -> str:
    """This process's node's IP address (the host a registered node is shown with)."""
    return ray.util.get_node_ip_address() if ray.is_initialized() else ""


def agent_actor_options(ray_node_id: str, name: str, namespace: str) -> dict:
    """Options for a node agent: pinned to its Ray node, detached (a restarted controller finds it),
    restarted there after a crash."""
    return {"name": name, "namespace": namespace, "lifetime": "detached", "num_cpus": 0, "max_restarts": -1,
            "max_task_retries": 0, "scheduling_strategy": pinned(ray_node_id)}
