"""NodeAgent: the actor that speaks for one Ray node's data directory (every node but the head,
whose directory the controller holds).

A thin shell over NodeDirectory (raylog/storage/node_directory.py): it holds the directory's lock
for as long as it lives, tells the controller which raylog node the directory is (its
meta.properties), gives a new directory its identity once the controller has recorded it, and
removes partition directories the controller dropped. One per Ray node and Ray session, named
by the Ray node id, pinned to that node and restarted there by Ray; detached, so a restarted
controller finds the agents running.
"""

from __future__ import annotations

import asyncio
import os

import ray

from actors import arguments as args
from placement import nodes as placement_nodes
from raylog.errors import LogDirError
from raylog.logs import configure_actor_logging
from raylog.storage.node_directory import NodeDirectory
from raylog.storage.node_meta import NodeMeta


class NodeAgent:
    def __init__(self, data_root: str):
        configure_actor_logging()
        self.directory = NodeDirectory(placement_nodes.own_data_dir(data_root))
        try:
            self.directory.lock.try_acquire()  # a restarted agent holds it again at once, if it can
        except OSError:
            pass  # identify() reports why

    async def identify(self, cluster_id: str) -> dict:
        """{"node_id": the id in the directory's identity, None for a new directory; "data_dir";
        "ray_node_id"}. Raises DataDirectoryInUseError while another live process holds the
        directory (another Ray node configured with it, or this node's previous session not gone
        yet), InconsistentClusterIdError for another cluster's directory, LogDirError for one that
        cannot be written or read."""
        cluster_id = args.text("cluster_id", cluster_id, 64)
        await asyncio.to_thread(self.directory.check_writable)
        self.directory.lock.acquire()  # held already, or free: else DataDirectoryInUseError naming the holder
        meta = self.directory.identity()
        if meta is not None:
            meta.check_cluster(cluster_id, self.directory.path)
        return {"node_id": None if meta is None else meta.node_id, "data_dir": str(self.directory.path),
                "ray_node_id": ray.get_runtime_context().get_node_id()}

    async def format(self, cluster_id: str, node_id: int) -> None:
        """Write the directory's identity (the controller recorded ``node_id`` first)."""
        meta = NodeMeta(args.text("cluster_id", cluster_id, 64), args.integer("node_id", node_id, 0, args.INT32_MAX))
        if not self.directory.lock.held:
            raise LogDirError(f"{self.directory.path} is not held by this agent: identify() first")
        await asyncio.to_thread(self.directory.format, meta)

    async def remove_partition(self, directory: str, topic_id: str) -> bool:
        """Delete a dropped replica's directory (named relative to the data directory) if it still
        belongs to ``topic_id``; True once it is gone."""
        directory = args.text("directory", directory, 4096)
        topic_id = args.text("topic_id", topic_id, 64)
        return await asyncio.to_thread(self.directory.remove_partition, directory, topic_id)

    async def ping(self) -> int:
        return os.getpid()
