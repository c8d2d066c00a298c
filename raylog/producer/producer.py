"""Producer: kafka-python's KafkaProducer API over raylog's partition replicas.

send() adds one record to its topic's open stage and returns a future; its
work per record is a few type checks and list appends under one lock.
send_batch() hands in many records at once as a stage of their own. The
sender thread cuts stages into partition batches (vectorized murmur2 for
keys), encodes each batch once in the format the replica appends and
consumers decode, and ships it (accumulator.py, batch_builder.py,
sender.py). Thread-safe.
"""

from __future__ import annotations

import functools
import itertools
import random
import time
from typing import Any, Sequence

import numpy as np

from raylog import memory
from raylog.producer.accumulator import RECORD_OVERHEAD_BYTES, RecordAccumulator
from raylog.producer.batch_builder import ListBinary, headers_size
from raylog.config import ProducerConfig, client_config
from raylog.errors import (
    IllegalStateError, InvalidPartitionError, InvalidRecordError, KafkaTimeoutError, RecordTooLargeError,
)
from raylog.producer.futures import CallbackRunner, FutureBatchMetadata, FutureRecordMetadata
from raylog.producer.sender import Sender

_time_ns = time.time_ns
_NONE_TYPE = type(None)
_BYTES_OR_NONE = {bytes, _NONE_TYPE}


def _to_bytes(obj: Any, what: str) -> bytes | None:
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, str):
        return obj.encode("utf-8")
    raise InvalidRecordError(f"{what} must be bytes, str or None without a serializer, got {type(obj).__name__} "
                             f"{_shown(obj)}")


def _shown(obj) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_headers(headers) -> list | None:
    if not headers:
        return None
    out = []
    try:
        items = list(headers)
    except TypeError:
        raise InvalidRecordError(f"headers must be a list of (str, bytes) pairs, got {headers!r}") from None
    for item in items:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)):
            raise InvalidRecordError(f"headers must be (str, bytes) pairs, got {item!r}")
        out.append((item[0], _to_bytes(item[1], "header value")))
    return out


def _pinned(topic: str, num_partitions: int, partition, count: int) -> list[int]:
    """send_batch's ``partition`` as one partition per record, -1 where the partitioner chooses."""
    if isinstance(partition, (int, np.integer)) and not isinstance(partition, bool):
        given = [int(partition)]
        parts = given * count
    else:
        try:
            items = list(partition)
        except TypeError:
            raise InvalidPartitionError(f"partition must be an int or a sequence of ints and Nones, got "
                                        f"{type(partition).__name__}") from None
        if len(items) != count:
            raise InvalidRecordError(f"{len(items)} partitions for {count} values")
        given = [p for p in items if p is not None]
        parts = [-1 if p is None else p for p in items]
    for p in given:
        if not isinstance(p, (int, np.integer)) or isinstance(p, bool) or not 0 <= p < num_partitions:
            raise InvalidPartitionError(f"topic {topic!r} has partitions 0..{num_partitions - 1}, not {p!r}")
    return parts


class _PartitionerCluster:
    """The cluster view kafka-python hands a partitioner: partitions and those with a leader."""

    def __init__(self, info):
        self._info = info

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self._info.num_partitions))

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return {p for p, leader in enumerate(self._info.leaders) if leader is not None}


def _check_timestamp(ts) -> int:
    if not isinstance(ts, (int, np.integer)) or isinstance(ts, bool) or ts < 0:
        raise InvalidRecordError(f"timestamp_ms must be a non-negative int, got {ts!r}")
    return int(ts)


_client_ids = itertools.count(1)


class Producer:
    """Publishes records to raylog topics (kafka-python's KafkaProducer names; every
    KafkaProducer config key is accepted, see ProducerConfig and IGNORED_CLIENT_KEYS)."""

    def __init__(self, cluster=None, **configs):
        from raylog.cluster import default_cluster

        self.config: ProducerConfig = client_config(ProducerConfig, configs)
        self.client_id = self.config.client_id or f"raylog-producer-{next(_client_ids)}"
        memory.tune()
        self._cluster = cluster or default_cluster()
        self._metadata = self._cluster.metadata
        self._producer_id = random.getrandbits(62)
        self._callbacks = CallbackRunner()
        self._acc = RecordAccumulator(self.config, self._metadata, self._callbacks,
                                      self._cluster.auto_creator(self.config.allow_auto_create_topics))
        self._sender = Sender(self.config, self._acc, self._metadata, self._producer_id,
                              self._cluster.config.replica_session_timeout_ms / 1000)
        self._sender.start()
        self._key_serializer = self.config.key_serializer
        self._value_serializer = self.config.value_serializer
        self._max_request_size = self.config.max_request_size
        self._partitioner = self.config.partitioner
        self._closed = False
        self._plain_send = self._acc.plain_send(functools.partial(Producer.send, self))
        if (self._key_serializer is None and self._value_serializer is None and self._partitioner is None
                and type(self).send is Producer.send):
            # One Python call per record for the common send(): the call from send() into the
            # accumulator's append was a sixth of the per-record cost (issue 33, bench.client_bench).
            self.send = functools.update_wrapper(self._plain_send, Producer.send, updated=(),
                                                 assigned=("__module__", "__name__", "__qualname__", "__doc__"))

    # --- API -------------------------------------------------------------------------------

    def send(self, topic: str, value=None, key=None, headers=None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; the future resolves to its RecordMetadata once acknowledged.

        Raises (before anything is queued) InvalidTopicError, UnknownTopicOrPartitionError,
        InvalidPartitionError, InvalidRecordError, RecordTooLargeError (the record alone is over
        max_request_size), IllegalStateError (closed), or KafkaTimeoutError (buffer full for
        max_block_ms). A record too large for the topic's max_message_bytes fails its own future.
        """
        original_key, original_value = key, value
        if key is not None and (self._key_serializer is not None or type(key) is not bytes):
            key = self._key_bytes(key)
        if value is not None and (self._value_serializer is not None or type(value) is not bytes):
            value = self._value_bytes(value)
        if partition is None and self._partitioner is not None:
            partition = self._partition_of(topic, original_key, key, original_value, value)
        size = RECORD_OVERHEAD_BYTES
        if key is not None:
            size += len(key)
        if value is not None:
            size += len(value)
        if (value is not None and headers is None and partition is None and timestamp_ms is None
                and size <= self._max_request_size):
            # Serialized to bytes and within every limit: the plain path takes it, never calling back.
            return self._plain_send(topic, value, key)
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        if headers:
            headers = _check_headers(headers)
            size += headers_size(headers)
        else:
            headers = None
        if size > self._max_request_size:
            raise RecordTooLargeError(
                f"record of {size} bytes is larger than max_request_size ({self._max_request_size} bytes)")
        if timestamp_ms is not None:
            timestamp_ms = _check_timestamp(timestamp_ms)
        if partition is not None and (type(partition) is not int or partition < 0):
            raise InvalidPartitionError(f"partition must be a non-negative int, got {partition!r}")
        return self._acc.append_record(topic, key, value, timestamp_ms, headers, partition, size, _time_ns())

    def _partition_of(self, topic: str, key, serialized_key, value, serialized_value) -> int:
        """The configured partitioner's choice, called as kafka-python calls it."""
        view = _PartitionerCluster(self._acc.topic_info(topic))
        chosen = self._partitioner
        if callable(getattr(chosen, "partition", None)):
            return chosen.partition(topic, key, serialized_key, value, serialized_value, view)
        return chosen(serialized_key, sorted(view.partitions_for_topic(topic)),
                      sorted(view.available_partitions_for_topic(topic)))

    def _key_bytes(self, key) -> bytes:
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        return _to_bytes(key, "key")

    def _value_bytes(self, value) -> bytes:
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        return _to_bytes(value, "value")

    def send_batch(self, topic: str, values: Sequence, keys: Sequence | None = None,
                   headers: Sequence | None = None, partition: int | Sequence[int | None] | None = None,
                   timestamps_ms: Sequence[int] | int | None = None) -> FutureBatchMetadata:
        """Queue many records at once: keyed records go to murmur2(key) partitions, unkeyed ones are
        cut into batch_size runs spread over the partitions; ``partition`` pins them all, or, as a
        sequence, each record (None: partitioned as if not given).

        Returns one future for all of them. Everything is validated before anything is queued, and
        either every record is queued or (KafkaTimeoutError after max_block_ms) none is.
        """
        if self._closed:
            raise IllegalStateError("cannot send: the producer is closed")
        count = len(values)
        if count == 0:
            raise InvalidRecordError("send_batch needs at least one record")
        values = self._column(values, self._value_serializer, "value")
        sizes = values.lengths() + RECORD_OVERHEAD_BYTES
        if keys is not None:
            if len(keys) != count:
                raise InvalidRecordError(f"{len(keys)} keys for {count} values")
            keys = self._column(keys, self._key_serializer, "key")
            if keys.nulls == count:
                keys = None
            else:
                sizes += keys.lengths()
        if headers is not None:
            if len(headers) != count:
                raise InvalidRecordError(f"{len(headers)} header lists for {count} values")
            headers = [_check_headers(h) for h in headers]
            if not any(headers):
                headers = None
        if timestamps_ms is None:
            timestamps: list | int = time.time_ns() // 1_000_000
        elif isinstance(timestamps_ms, (int, np.integer)):
            timestamps = _check_timestamp(timestamps_ms)
        else:
            if len(timestamps_ms) != count:
                raise InvalidRecordError(f"{len(timestamps_ms)} timestamps for {count} values")
            stamps = np.asarray(timestamps_ms)
            if stamps.dtype.kind not in "iu" or (stamps < 0).any():
                raise InvalidRecordError("timestamps_ms must be non-negative ints")
            timestamps = stamps.astype(np.int64).tolist()
        if headers is not None:
            sizes += np.fromiter((headers_size(h) if h else 0 for h in headers), dtype=np.int64, count=count)
        biggest = int(sizes.max())
        if biggest > self._max_request_size:
            raise RecordTooLargeError(f"record {int(sizes.argmax())} of {biggest} bytes is larger than "
                                      f"max_request_size ({self._max_request_size} bytes)")
        info = self._acc.topic_info(topic)
        if partition is None and self._partitioner is not None:
            raw_keys = ([None] * count if keys is None
                        else keys.items if isinstance(keys, ListBinary) else keys.array.to_pylist())
            partition = [self._partition_of(topic, k, k, None, None) for k in raw_keys]
        partitions = None if partition is None else _pinned(topic, info.num_partitions, partition, count)
        result = self._acc.append_stage(topic, info, keys if keys is not None else [None] * count, values,
                                        timestamps, headers, partitions, int(sizes.sum()), keyed=keys is not None)
        return FutureBatchMetadata(result)

    @staticmethod
    def _column(items, serializer, what: str):
        """Keys or values as a ListBinary, or as an ArrowBinary when given as a pyarrow array
        (sent from its buffers: no Python object per record)."""
        if type(items).__module__.startswith("pyarrow"):
            if serializer is not None:
                raise InvalidRecordError(f"{what}_serializer applies to Python objects; {what}s given as a pyarrow "
                                         "array are sent as they are")
            from raylog.arrow_records import ArrowBinary

            return ArrowBinary(items, what)
        if serializer is not None:
            return ListBinary([None if x is None else _to_bytes(serializer(x), what) for x in items])
        if not isinstance(items, list):
            items = list(items)
        if set(map(type, items)) <= _BYTES_OR_NONE:
            return ListBinary(items)
        return ListBinary([_to_bytes(x, what) for x in items])

    def flush(self, timeout: float | None = None) -> None:
        """Send every buffered record now and wait until each has its outcome and its callbacks
        have run (KafkaTimeoutError past ``timeout`` seconds)."""
        self._acc.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds), then stop the sender; records still unsent then fail
        with IllegalStateError."""
        if self._closed:
            return
        self._closed = True
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._acc.flush(timeout)
        except KafkaTimeoutError:
            pass
        finally:
            self._acc.close()
            self._sender.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if self._sender.is_alive():
                self._sender.stop(IllegalStateError("the producer was closed before the record was acknowledged"))
                self._sender.join(5)

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition ids (kafka-python's; creates the topic when auto-creation applies)."""
        return set(range(self._acc.topic_info(topic).num_partitions))

    def metrics(self, raw: bool = False) -> dict | None:
        """kafka-python's producer metrics, {group: {name: value}} ('producer-metrics':
        record-send-rate, request-latency-avg, ...); None with metrics_enabled=False."""
        if not self.config.metrics_enabled:
            return None
        return self._sender.metrics.report(self.config.buffer_memory, self._acc.available_bytes())

    def __repr__(self) -> str:
        return f"<Producer client_id={self.client_id}>"

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
