"""Producer: kafka-python's KafkaProducer API over raylog's partition replicas.

send() adds one record to its partition's batch and returns a future;
send_batch() hands in many records at once and is the fast path (no Python
work per record beyond partitioning by key). Batches are encoded once, here,
in the format the replica appends and consumers decode. Thread-safe.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any, Sequence

import numpy as np

from raylog.accumulator import RECORD_OVERHEAD_BYTES, FutureBatchMetadata, FutureRecordMetadata, RecordAccumulator
from raylog.config import ProducerConfig, config_from_mapping
from raylog.errors import IllegalStateError, InvalidPartitionError, InvalidRecordError, RecordTooLargeError
from raylog.partitioner import StickyPartitioner, partition_for_key
from raylog.records import TopicPartition
from raylog.sender import Sender


def _to_bytes(obj: Any, what: str) -> bytes | None:
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, (bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, str):
        return obj.encode("utf-8")
    raise InvalidRecordError(f"{what} must be bytes, str or None without a serializer, got {type(obj).__name__}")


def _check_headers(headers) -> list | None:
    if not headers:
        return None
    out = []
    for item in headers:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)):
            raise InvalidRecordError(f"headers must be (str, bytes) pairs, got {item!r}")
        out.append((item[0], _to_bytes(item[1], "header value")))
    return out


class Producer:
    """Publishes records to raylog topics (kafka-python's KafkaProducer names)."""

    def __init__(self, cluster=None, **configs):
        from raylog.cluster import default_cluster

        self.config: ProducerConfig = config_from_mapping(ProducerConfig, configs)
        self._cluster = cluster or default_cluster()
        self._metadata = self._cluster.metadata
        self._producer_id = random.getrandbits(62)
        self._acc = RecordAccumulator(self.config, self._producer_id)
        self._sender = Sender(self.config, self._acc, self._metadata)
        self._sender.start()
        self._sticky = StickyPartitioner()
        self._closed = False

    # --- helpers ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")

    def _key(self, key) -> bytes | None:
        ser = self.config.key_serializer
        return _to_bytes(ser(key) if ser is not None and key is not None else key, "key")

    def _value(self, value) -> bytes | None:
        ser = self.config.value_serializer
        return _to_bytes(ser(value) if ser is not None and value is not None else value, "value")

    def _partition_count(self, topic: str) -> int:
        # Metadata validates the name on a cache miss, so an invalid name never gets this far twice.
        return self._metadata.partition_count(topic)

    @staticmethod
    def _check_partition(topic: str, partition, n: int) -> int:
        if not isinstance(partition, int) or not 0 <= partition < n:
            raise InvalidPartitionError(f"topic {topic!r} has partitions 0..{n - 1}, not {partition!r}")
        return partition

    # --- API -------------------------------------------------------------------------------

    def send(self, topic: str, value=None, key=None, headers=None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; the future resolves to its RecordMetadata once acknowledged.

        Raises (before anything is queued) InvalidTopicError, UnknownTopicOrPartitionError,
        InvalidPartitionError, InvalidRecordError or RecordTooLargeError.
        """
        self._check_open()
        key_b = self._key(key)
        value_b = self._value(value)
        hdrs = _check_headers(headers)
        size = (len(key_b) if key_b else 0) + (len(value_b) if value_b else 0) + RECORD_OVERHEAD_BYTES
        if size > self.config.max_request_size:
            raise RecordTooLargeError(f"record of {size} bytes exceeds max_request_size {self.config.max_request_size}")
        n = self._partition_count(topic)
        sticky = False
        if partition is not None:
            self._check_partition(topic, partition, n)
        elif key_b is not None:
            partition = partition_for_key(key_b, n)
        else:
            partition = self._sticky.partition(topic, n)
            sticky = True
        ts = int(timestamp_ms) if timestamp_ms is not None else time.time_ns() // 1_000_000
        future, closed = self._acc.append(TopicPartition(topic, partition), key_b, value_b, ts, hdrs)
        if sticky and closed:
            self._sticky.on_new_batch(topic, n, partition)
        return future

    def send_batch(self, topic: str, values: Sequence, keys: Sequence | None = None,
                   headers: Sequence | None = None, partition: int | None = None,
                   timestamps_ms: Sequence[int] | int | None = None) -> FutureBatchMetadata:
        """Queue many records at once: keyed records go to murmur2(key) partitions, unkeyed ones
        are cut into batch_size pieces spread over the partitions; ``partition`` pins them all.

        Returns one future for all of them. Validation happens before anything is queued.
        """
        self._check_open()
        count = len(values)
        if count == 0:
            raise InvalidRecordError("send_batch needs at least one record")
        if self.config.value_serializer is not None or any(type(v) is not bytes for v in values):
            values = [self._value(v) for v in values]
        elif not isinstance(values, list):
            values = list(values)
        if keys is not None:
            if len(keys) != count:
                raise InvalidRecordError(f"{len(keys)} keys for {count} values")
            keys = [self._key(k) for k in keys]
        if headers is not None:
            if len(headers) != count:
                raise InvalidRecordError(f"{len(headers)} header lists for {count} values")
            headers = [_check_headers(h) for h in headers]
        if timestamps_ms is None:
            timestamps = [time.time_ns() // 1_000_000] * count
        elif isinstance(timestamps_ms, int):
            timestamps = [timestamps_ms] * count
        else:
            timestamps = [int(t) for t in timestamps_ms]
            if len(timestamps) != count:
                raise InvalidRecordError(f"{len(timestamps)} timestamps for {count} values")
        sizes = np.fromiter((len(v) if v is not None else 0 for v in values), dtype=np.int64, count=count)
        if keys is not None:
            sizes += np.fromiter((len(k) if k is not None else 0 for k in keys), dtype=np.int64, count=count)
        sizes += RECORD_OVERHEAD_BYTES
        biggest = int(sizes.max())
        if biggest > self.config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {biggest} bytes exceeds max_request_size {self.config.max_request_size}")
        n = self._partition_count(topic)
        groups = self._group(topic, n, count, keys, partition, int(sizes.sum()))
        parts = []
        for p, indices in groups:
            for piece in self._pieces(indices, sizes):
                idx = piece.tolist()
                result = self._acc.append_columns(
                    TopicPartition(topic, p),
                    [keys[i] for i in idx] if keys is not None else [None] * len(idx),
                    [values[i] for i in idx],
                    [timestamps[i] for i in idx],
                    [headers[i] for i in idx] if headers is not None and any(headers[i] for i in idx) else None,
                    int(sizes[piece].sum()))
                parts.append((result, piece))
        return FutureBatchMetadata(parts, count, timestamps)

    def _group(self, topic: str, n: int, count: int, keys, partition, total_bytes: int):
        """(partition, record indices) groups, in record order within each group."""
        if partition is not None:
            return [(self._check_partition(topic, partition, n), np.arange(count))]
        if keys is not None and any(k is not None for k in keys):
            sticky = self._sticky.partition(topic, n)
            assigned = np.fromiter((partition_for_key(k, n) if k is not None else sticky for k in keys),
                                   dtype=np.int64, count=count)
            return [(int(p), np.flatnonzero(assigned == p)) for p in np.unique(assigned)]
        pieces = max(1, math.ceil(total_bytes / self.config.batch_size))
        start = self._sticky.partition(topic, n)
        chunks = np.array_split(np.arange(count), min(pieces, count))
        self._sticky.on_new_batch(topic, n, start)
        return [((start + i) % n, c) for i, c in enumerate(chunks)]

    def _pieces(self, indices: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
        """Cut one partition's records into batches of about batch_size bytes."""
        total = int(sizes[indices].sum())
        pieces = max(1, math.ceil(total / self.config.batch_size))
        return [p for p in np.array_split(indices, min(pieces, len(indices))) if len(p)]

    def flush(self, timeout: float | None = None) -> None:
        """Send every buffered record now and wait for all outcomes (KafkaTimeoutError past ``timeout``)."""
        self._acc.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender. Records still unsent after ``timeout`` fail."""
        if self._closed:
            return
        self._closed = True
        try:
            self._acc.flush(timeout)
        finally:
            self._acc.close()
            if self._acc.has_pending():
                self._acc.abort_all(IllegalStateError("producer closed before the record was sent"))
            self._sender.join(timeout=5)
            self._sender.stop()

    def partitions_for(self, topic: str) -> set[int]:
        return set(range(self._partition_count(topic)))

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
