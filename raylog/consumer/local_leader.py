"""Finding a partition's files on this Ray node, for reads with no call per fetch: the leader's,
else an in-sync follower's (committed records are the same there)."""

from __future__ import annotations

import time

import ray

from raylog.errors import RaylogError
from raylog.metadata import Metadata
from raylog.storage.local_reader import LocalReader
from raylog.storage.read_view import ROLE_FOLLOWER, ROLE_LEADER

STALE_REFRESH_S = 1.0
"""How often the metadata is looked at again while the local replica's lease has lapsed."""


def open_local_reader(metadata: Metadata, topic: str, partition: int) -> tuple[LocalReader | None, int | None]:
    """(a reader of the segment files of the partition's leader, or else of an in-sync follower,
    on this process's Ray node; the leader epoch it is for); (None, that epoch) when no replica
    here can be read; (None, None) without a leader. The metadata says where each replica lives,
    so no replica is called: a paused leader must not hold up a poll (the reader's page, not the
    metadata, says whether the files may be served). The caller keeps the reader until the
    metadata shows another epoch."""
    try:
        info = metadata.describe(topic).partitions[partition]
    except (RaylogError, IndexError):
        return None, None
    if info.leader is None:
        return None, None
    # Asked each time, not cached: a process may connect to another Ray cluster later.
    here = ray.get_runtime_context().get_node_id()
    # A follower here is opened whatever the cached ISR says (it may be older than the follower's
    # return to the ISR): its page says "follower" only while it is in the ISR it last heard of.
    followers = [(r, ROLE_FOLLOWER) for r in info.replicas if r.replica_id != info.leader.replica_id]
    for replica, role in [(info.leader, ROLE_LEADER), *followers]:
        if replica.ray_node_id == here:
            try:
                return LocalReader(replica.directory, role), info.leader_epoch
            except OSError:
                return None, info.leader_epoch
    return None, info.leader_epoch


class LocalLeader:
    """One partition's reads from its leader's (or an in-sync follower's) files on this node: the
    reader is looked up once per leader epoch the metadata names (a new leader may run
    elsewhere) and closed with it."""

    def __init__(self, metadata: Metadata, topic: str, partition: int):
        self._metadata = metadata
        self._topic = topic
        self._partition = partition
        self.reader: LocalReader | None = None
        self.epoch: int | None = None
        """The leader epoch ``reader`` was looked up for; None: look up again."""
        self._refreshed_at = 0.0
        self.lapsed = False
        """The last read found the replica's lease lapsed (paused, or cut off from the controller)."""

    def current(self) -> LocalReader | None:
        """The reader for the leader the metadata names now, or None when that leader is elsewhere."""
        try:
            epoch = self._metadata.leader_epoch(self._topic, self._partition)
        except RaylogError:
            epoch = None
        if self.epoch is None or self.epoch != epoch:
            self.close()
            self.reader, self.epoch = open_local_reader(self._metadata, self._topic, self._partition)
        return self.reader

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int] | None:
        """LocalReader.read from the current leader's (or follower's) files; None: fetch through
        the leader."""
        self.lapsed = False
        reader = self.current()
        if reader is None:
            return None
        got = reader.read(offset, max_bytes, self.epoch)
        if got is None:
            snap = reader.snapshot()
            if snap is not None and self.epoch is not None and snap.leader_epoch > self.epoch:
                # The replica has heard of a newer leader than our metadata names: a fetch to the
                # old leader may still succeed and never refresh it, so refresh it now.
                self._metadata.invalidate(self._topic)
                self.close()
            elif snap is not None and time.monotonic_ns() >= snap.valid_until_ns:
                # Its lease lapsed (paused, cut off): the controller is about to fence it, and the
                # metadata must be looked at again for whoever leads next.
                self.lapsed = True
                if time.monotonic() - self._refreshed_at >= STALE_REFRESH_S:
                    self._refreshed_at = time.monotonic()
                    self._metadata.invalidate(self._topic)
        return got

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.reader, self.epoch = None, None
