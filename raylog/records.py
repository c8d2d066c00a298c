"""What clients hand back to users: small immutable records, with kafka-python 3.x's names and
fields in kafka-python's order, so positional unpacking ported from kafka-python works.

They are NamedTuples, as in kafka-python, so the clients build them in bulk
with C-level constructors (``tuple.__new__`` over zipped columns) instead of
Python work per field.
"""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record landed. offset is -1 when acks=0 (nobody waited to learn it)."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    """The producer's timestamp, or the broker's for a LogAppendTime topic."""
    checksum: int | None
    """None: batches carry one CRC for all their records (Kafka's v2 format), as in kafka-python."""
    serialized_key_size: int
    """Bytes of the serialized key; -1 without a key."""
    serialized_value_size: int
    """Bytes of the serialized value; -1 for a null value (a tombstone)."""
    serialized_header_size: int
    """Bytes of header names (UTF-8) and values; -1 without headers."""


class NoHeaders(tuple):
    """The headers of a record that has none: empty, immutable, and equal to ``[]`` (kafka-python
    gives each record a new empty list). One shared value instead of a list per record keeps
    poll()'s records from feeding Python's cyclic collector: measured 0.76 -> 2.3 M records/s in
    poll() (bench/client_bench.py), the collector having been two thirds of the time."""

    __slots__ = ()

    def __eq__(self, other) -> bool:
        return isinstance(other, (list, tuple)) and len(other) == 0

    def __ne__(self, other) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return "[]"


NO_HEADERS = NoHeaders()


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    leader_epoch: int
    """Epoch of the leader that appended the record."""
    offset: int
    timestamp: int
    timestamp_type: int
    """0 = CreateTime (the producer's clock), 1 = LogAppendTime (the broker's)."""
    key: bytes | None
    value: bytes | None
    headers: list
    """(name, value) pairs; NO_HEADERS (empty, equal to ``[]``, immutable) when the record has none."""
    checksum: int | None
    """None: batches carry one CRC for all their records (Kafka's v2 format), as in kafka-python."""
    serialized_key_size: int
    """Bytes of the key as stored; -1 without a key."""
    serialized_value_size: int
    """Bytes of the value as stored; -1 for a null value (a tombstone)."""
    serialized_header_size: int
    """Bytes of header names (UTF-8) and values; -1 without headers."""


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int = -1
    """Epoch of the leader that appended the record at ``offset``; -1 when not known."""


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to consume, and the committer's note."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1
    """Epoch of the leader the committed position was read from; -1 when not known."""


class ConsumerGroupMetadata(NamedTuple):
    """A group member as its application saw it at its last poll (Kafka's ConsumerGroupMetadata):
    ``generation_id`` is the member epoch the records of that poll were fetched under (0 before
    the first assignment, -1 without a group)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


def serialized_header_size(headers) -> int:
    """kafka-python's serialized_header_size: name bytes (UTF-8) plus value bytes; -1 without headers."""
    if not headers:
        return -1
    return sum(len(name.encode("utf-8")) + (0 if value is None else len(value)) for name, value in headers)
