"""Requests and responses that cross Ray calls between clients and actors (no Ray here).

Kept to plain frozen dataclasses of ints, strings and buffers so they pickle
cheaply and stay stable as both sides evolve. The two on every record's path,
ProduceResponse and FetchResponse, travel as *plain tuples*: Ray encodes
builtins with msgpack but pickles any class, and that cost 0.3-0.4 ms of a
1.3 ms actor round trip here (bench of an async actor returning a small
dataclass vs a tuple). The NamedTuples below name the tuple's fields; a
replica returns ``tuple`` values in that order and clients rebuild them with
``_make``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

EARLIEST_TIMESTAMP = -2
"""list_offsets sentinel: the log start offset (Kafka's ListOffsetsRequest.EARLIEST_TIMESTAMP)."""
LATEST_TIMESTAMP = -1
"""list_offsets sentinel: the high watermark (Kafka's ListOffsetsRequest.LATEST_TIMESTAMP)."""


class ProduceResponse(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False
    """True when the batch's producer id and sequence were already appended (a retry)."""


class FetchResponse(NamedTuple):
    records: Any
    """Whole batches as one contiguous numpy uint8 array (from Ray's shared memory when large)."""
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


# --- replies to another language (the Spark connector's JVM) --------------------------------------
# Ray's Java API receives lists, not named values: a replica answers ``list(Reply(...))`` and the
# JVM reads each field at the position these names give. spark_bridge's RayCalls.java declares
# the same names in the same order (tests/unit/bridge/test_cross_language_replies.py checks it).


class ErrorReply(NamedTuple):
    """A raylog error as the JVM gets it ([] when there was none)."""

    error_class: str
    message: str
    retriable: int
    log_start: int
    log_end: int


class FetchBytesReply(NamedTuple):
    records: bytes
    high_watermark: int
    log_start: int
    log_end: int
    error: list
    """An ErrorReply's fields, or []."""


class ProduceBytesReply(NamedTuple):
    base_offset: int
    error: list
    """An ErrorReply's fields, or []."""


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """One replica of a partition: the node it lives on and its directory there."""

    node_id: int
    """The raylog node id (stable across restarts)."""
    directory: str
    """Absolute where its node runs now; relative to the node's data directory while it is missing."""
    replica_id: int = 0
    ray_node_id: str = ""
    """The Ray node its node runs on this session ("" while missing): what same-node readers compare."""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: ReplicaAssignment | None
    """None while the partition is offline (no in-sync replica alive)."""
    replicas: tuple[ReplicaAssignment, ...]
    leader_epoch: int
    actor_name: str
    """The leader replica's actor name ("" while offline)."""
    isr: tuple[int, ...] = ()
    """Replica ids of the in-sync replicas."""
    partition_epoch: int = 0
    offline_reason: str = ""
    """Why an offline partition has no leader, and what brings it back."""

    @property
    def offline(self) -> bool:
        return self.leader is None

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionInfo, ...]
    config: dict = field(default_factory=dict)
    internal: bool = False
    topic_id: str = ""
    ever_compacted: bool = False
    """Its cleanup policy included compact at some time: its offsets can have gaps."""
