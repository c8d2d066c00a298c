"""What clients hand back to users: small immutable records (kafka-python's names).

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
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    """0 = CreateTime (the producer's clock), 1 = LogAppendTime (the broker's)."""
    key: bytes | None
    value: bytes | None
    headers: list
    """(name, value) pairs; an empty list when the record has none."""


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to consume, and the committer's note."""

    offset: int
    metadata: str = ""
