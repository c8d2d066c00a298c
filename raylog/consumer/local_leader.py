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


class LocalLeader:
    """One partition's reads from its leader's files on this node: the reader is looked up once per
    leader epoch the metadata names (a new leader may run elsewhere) and closed with it."""

    def __init__(self, metadata: Metadata, topic: str, partition: int, timeout_s: float):
        self._metadata = metadata
        self._topic = topic
        self._partition = partition
        self._timeout_s = timeout_s
        self.reader: LocalReader | None = None
        self.epoch: int | None = None
        """The leader epoch ``reader`` was looked up for; None: look up again."""

    def current(self) -> LocalReader | None:
        """The reader for the leader the metadata names now, or None when that leader is elsewhere."""
        try:
            epoch = self._metadata.leader_epoch(self._topic, self._partition)
        except RaylogError:
            epoch = None
        if self.epoch is None or self.epoch != epoch:
            self.close()
            self.reader, self.epoch = open_local_reader(self._metadata, self._topic, self._partition, self._timeout_s)
        return self.reader

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int] | None:
        """LocalReader.read from the current leader's files; None: fetch through the leader."""
        reader = self.current()
        return None if reader is None else reader.read(offset, max_bytes, self.epoch)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.reader, self.epoch = None, None
