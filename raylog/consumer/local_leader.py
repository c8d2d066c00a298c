"""Finding a partition leader's files on this Ray node, for reads with no call per fetch."""

from __future__ import annotations

import ray

from raylog import ray_calls
from raylog.errors import RaylogError
from raylog.metadata import Metadata
from raylog.storage.local_reader import LocalReader


def open_local_reader(metadata: Metadata, topic: str, partition: int,
                      timeout_s: float) -> tuple[LocalReader | None, int | None]:
    """(a reader of the leader's segment files, the leader epoch it is for) when the partition's
    leader runs on this process's Ray node; (None, that epoch) otherwise, or when its files are
    not readable here; (None, None) without a leader. One call to the leader (its location); the
    caller keeps the reader until the metadata shows another epoch."""
    try:
        epoch = metadata.leader_epoch(topic, partition)
    except RaylogError:
        return None, None
    try:
        node, directory = ray_calls.get(metadata.leader(topic, partition).read_location.remote(), timeout_s)
        # Asked each time, not cached: a process may connect to another Ray cluster later.
        if node != ray.get_runtime_context().get_node_id():
            return None, epoch
        return LocalReader(directory), epoch
    except (RaylogError, OSError):
        return None, epoch
