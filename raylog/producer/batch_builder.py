"""Cutting a closed stage of records into partition batches, and encoding them.

One pass per stage, vectorized over its records:

1. Partition: an explicit partition wins; keyed records get
   ``murmur2(key) % partitions`` for all keys in one numpy call; unkeyed
   records are cut into runs of about batch_size bytes, the first run
   continuing the sticky partition's and the next ones round-robin after it
   (KIP-480: one partition per batch, moving on when the batch fills).
2. Group by partition, keeping send order inside each group (stable sort).
3. Cut each group into batches by bytes: a batch closes before it would pass
   batch_size, and never passes the hard limit, min(the topic's
   max_message_bytes, max_request_size), even if lz4 expanded it. A record
   that alone would pass the hard limit gets a batch of its own; if it is
   still too large once encoded, it fails alone with RecordTooLargeError.
4. Encode each batch (batch.build_columns) with the producer id; epoch and
   sequence are stamped when the sender first sends it.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from raylog.producer.accumulator import RECORD_OVERHEAD_BYTES, Stage
from raylog.config import ProducerConfig
from raylog.errors import RecordTooLargeError
from raylog.producer.partitioner import StickyPartitioner, partitions_for_keys
from raylog.records import TopicPartition, serialized_header_size
from raylog.storage import batch as record_batch
from raylog.storage.payload import BinaryColumn

BATCH_OVERHEAD_BYTES = record_batch.HEADER_SIZE + 256
"""Batch header, payload header and alignment padding, rounded up."""


def headers_size(headers) -> int:
    """Upper bound of a record's headers in the payload's msgpack (names, values, framing)."""
    return sum(len(k) + (len(v) if v is not None else 0) + 16 for k, v in headers) + 8


def _sizes_or_absent(source, nulls: int, lengths: np.ndarray) -> np.ndarray:
    if nulls == 0:
        return lengths
    if source is None or nulls == len(lengths):
        return np.full(len(lengths), -1, dtype=np.int64)
    return np.where(source.present(), lengths, -1)


def _serialized_sizes(stage, keys, key_nulls: int, key_lengths: np.ndarray, values, value_nulls: int,
                      value_lengths: np.ndarray) -> tuple:
    """kafka-python's serialized key, value and header sizes per record (-1 where absent)."""
    n = len(value_lengths)
    header_sizes = (np.full(n, -1, dtype=np.int64) if stage.headers is None
                    else np.fromiter(map(serialized_header_size, stage.headers), dtype=np.int64, count=n))
    return (_sizes_or_absent(keys, key_nulls, key_lengths), _sizes_or_absent(values, value_nulls, value_lengths),
            header_sizes)


def record_size(key, value, headers) -> int:
    """The bytes a record reserves in buffer_memory and counts toward its batch's size."""
    size = RECORD_OVERHEAD_BYTES
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        size += headers_size(headers)
    return size


def lz4_bound(nbytes: int) -> int:
    """Largest lz4 block output for ``nbytes`` of input (LZ4_compressBound) plus its size prefix."""
    return nbytes + nbytes // 255 + 16 + 4


class ProducerBatch:
    """One encoded batch for one partition: what the sender ships, retries and completes."""

    __slots__ = ("tp", "result", "indices", "records", "count", "nbytes", "created", "attempts",
                 "retry_at", "epoch", "base_sequence", "order", "sent_at", "sent_to_epoch", "ever_sent", "error",
                 "last_error")

    def __init__(self, tp: TopicPartition, result, indices: np.ndarray, records: bytearray | None, nbytes: int,
                 created: float, order: int):
        self.tp = tp
        self.result = result
        self.indices = indices
        """Positions of this batch's records in the stage (and its result)."""
        self.records = records
        self.count = len(indices)
        self.nbytes = nbytes
        """Bytes reserved in buffer_memory for these records, released when the batch completes."""
        self.created = created
        self.attempts = 0
        self.retry_at = 0.0
        self.epoch = -1
        self.base_sequence = -1
        """-1 until first sent: sequences are assigned in send order, so a batch that never leaves
        the producer never opens a gap in the partition's sequence."""
        self.order = order
        """Position among this producer's batches for the partition: retries go back in this order."""
        self.sent_at = 0.0
        self.sent_to_epoch = -1
        """The leader epoch of the leader its last attempt went to."""
        self.ever_sent = False
        self.error: BaseException | None = None
        """Set when the batch failed before it could be sent (a record too large once encoded)."""
        self.last_error: BaseException | None = None
        """The retriable error its last attempt got, named when delivery_timeout_ms runs out."""


class ListBinary:
    """Keys or values given as Python bytes (and None): what ``send`` appends and ``send_batch``
    takes from lists. raylog.arrow_records.ArrowBinary is the same for pyarrow arrays."""

    __slots__ = ("items", "nulls", "_lengths")

    def __init__(self, items: list):
        self.items = items
        self._lengths = None
        try:
            # With no None among the items (the common case) this one pass is all: counting None
            # compares every item with it, 40% of the cost of the lengths again (issue 33).
            self._lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
            self.nulls = 0
        except TypeError:
            self.nulls = items.count(None)

    def __len__(self) -> int:
        return len(self.items)

    def lengths(self) -> np.ndarray:
        """Byte length of each entry (0 for None), computed once."""
        if self._lengths is None:  # some entries are None
            items, n = self.items, len(self.items)
            self._lengths = (np.zeros(n, dtype=np.int64) if self.nulls == n else
                             np.fromiter((0 if x is None else len(x) for x in items), dtype=np.int64, count=n))
        return self._lengths

    def present(self) -> np.ndarray:
        return np.fromiter((x is not None for x in self.items), dtype=bool, count=len(self.items))

    def column(self, idx: np.ndarray, contiguous: bool, lengths: np.ndarray, nulls: int | None) -> BinaryColumn:
        """The entries at ``idx`` as a payload column (``lengths`` and ``nulls`` as from_pylist takes them)."""
        return BinaryColumn.from_pylist(_take(self.items, idx, contiguous), lengths, nulls)


def _take(items: list, idx: np.ndarray, contiguous: bool) -> list:
    if contiguous:
        return items[int(idx[0]):int(idx[-1]) + 1]
    return list(itemgetter(*idx.tolist())(items)) if len(idx) > 1 else [items[int(idx[0])]]


def binary_source(items):
    """A stage's keys or values as ListBinary or ArrowBinary."""
    return items if hasattr(items, "column") else ListBinary(items)


class BatchBuilder:
    """Owned by the sender thread (not thread-safe): its sticky partitions and batch order."""

    def __init__(self, config: ProducerConfig, producer_id: int):
        self.config = config
        self.producer_id = producer_id if config.enable_idempotence else record_batch.NO_PRODUCER_ID
        self.sticky = StickyPartitioner()
        self._order = 0

    def hard_limit(self, stage: Stage) -> int:
        return min(stage.info.max_message_bytes, self.config.max_request_size)

    def cut(self, stage: Stage) -> list[ProducerBatch]:
        """The stage's records as encoded partition batches, in send order per partition; also
        tells the stage's result which partition each record went to."""
        n = len(stage.values)
        values = binary_source(stage.values)
        value_nulls = values.nulls
        value_lengths = values.lengths()
        if stage.keyed:
            keys = binary_source(stage.keys)
            key_nulls, key_lengths = keys.nulls, keys.lengths()
        else:
            keys, key_nulls, key_lengths = None, n, np.zeros(n, dtype=np.int64)
        sizes = value_lengths + key_lengths + RECORD_OVERHEAD_BYTES
        if stage.headers is not None:
            sizes += np.fromiter((headers_size(h) if h else 0 for h in stage.headers), dtype=np.int64, count=n)
        limit = self.hard_limit(stage)
        budget = max(1, (limit - BATCH_OVERHEAD_BYTES) * 255 // 256 - 64)
        target = min(self.config.batch_size, budget)
        parts = self._partitions(stage, keys, n, key_nulls, key_lengths, sizes, target)
        if isinstance(stage.timestamps, int):
            timestamps = np.full(n, stage.timestamps, dtype=np.int64)
        else:
            timestamps = np.fromiter(stage.timestamps, dtype=np.int64, count=n)
            if stage.clock_ns:
                timestamps //= 1_000_000
                stage.result.timestamps = timestamps
        columns = _Columns(stage, keys, values, value_lengths, 0 if value_nulls == 0 else None,
                           key_lengths, n if key_nulls == n else (0 if key_nulls == 0 else None), timestamps)
        batches: list[ProducerBatch] = []
        # Unkeyed runs are contiguous and each fits ``target``: one batch per run, in send order.
        groups = _runs(parts) if key_nulls == n and stage.partitions is None else _groups(parts)
        for p, idx, contiguous in groups:
            tp = TopicPartition(stage.topic, p)
            for piece, piece_contiguous in _pieces(idx, sizes, target, contiguous):
                batches.append(self._encode(columns, tp, piece, piece_contiguous, sizes, limit))
        # Give the stage's reserved bytes back exactly: the last batch takes the rounding.
        reserved = sum(b.nbytes for b in batches)
        if batches:
            batches[-1].nbytes += stage.nbytes - reserved
        stage.result.set_batches(parts.tolist(), len(batches), _serialized_sizes(stage, keys, key_nulls, key_lengths,
                                                                                 values, value_nulls, value_lengths))
        return batches

    def _partitions(self, stage: Stage, keys, n: int, key_nulls: int, key_lengths: np.ndarray,
                    sizes: np.ndarray, run_bytes: int) -> np.ndarray:
        num = stage.info.num_partitions
        parts = (np.asarray(stage.partitions, dtype=np.int64) if stage.partitions is not None
                 else np.full(n, -1, dtype=np.int64))
        if key_nulls < n:
            if key_nulls == 0 and stage.partitions is None:
                every = np.arange(n)
                parts = partitions_for_keys(keys.column(every, True, key_lengths, 0), num)
            else:
                keyed = np.flatnonzero((parts == -1) & (key_lengths > 0)) if key_nulls == 0 else np.flatnonzero(
                    (parts == -1) & keys.present())
                if len(keyed):
                    parts[keyed] = partitions_for_keys(keys.column(keyed, False, key_lengths[keyed], 0), num)
        rest = np.flatnonzero(parts == -1)
        if len(rest):
            # Unkeyed records: runs of up to a batch's bytes, sticky first, then round-robin.
            parts[rest] = self.sticky.runs(stage.topic, num, sizes[rest], run_bytes)
        return parts

    def _encode(self, columns: "_Columns", tp: TopicPartition, idx: np.ndarray, contiguous: bool,
                sizes: np.ndarray, limit: int) -> ProducerBatch:
        stage = columns.stage
        self._order += 1
        nbytes = int(sizes[idx].sum())
        batch = ProducerBatch(tp, stage.result, idx, None, nbytes, stage.created, self._order)
        keys = (BinaryColumn.nulls(len(idx)) if columns.key_nulls == len(stage.values)
                else columns.keys.column(idx, contiguous, columns.key_lengths[idx], columns.key_nulls))
        values = columns.values.column(idx, contiguous, columns.value_lengths[idx], columns.value_nulls)
        headers = None
        if stage.headers is not None:
            headers = _take(stage.headers, idx, contiguous)
        encoded = record_batch.build_columns(
            keys, values, columns.timestamps[idx], headers, self.config.compression_type,
            producer_id=self.producer_id, producer_epoch=0 if self.producer_id >= 0 else -1,
            base_sequence=0 if self.producer_id >= 0 else -1)
        if len(encoded) > limit:
            setting = ("the topic's max_message_bytes" if limit == stage.info.max_message_bytes
                       else "the producer's max_request_size")
            batch.error = RecordTooLargeError(
                f"a record of {nbytes - RECORD_OVERHEAD_BYTES} bytes encodes to a {len(encoded)}-byte batch, "
                f"over {setting} of {limit} bytes (topic {stage.topic!r})")
            return batch
        batch.records = encoded
        return batch


class _Columns:
    """A stage's per-record lengths and timestamps, computed once for all its batches."""

    __slots__ = ("stage", "keys", "values", "value_lengths", "value_nulls", "key_lengths", "key_nulls", "timestamps")

    def __init__(self, stage, keys, values, value_lengths, value_nulls, key_lengths, key_nulls, timestamps):
        self.stage = stage
        self.keys = keys
        self.values = values
        self.value_lengths = value_lengths
        self.value_nulls = value_nulls
        """0 when no value is null (so no batch of the stage has a null value), else None: count."""
        self.key_lengths = key_lengths
        self.key_nulls = key_nulls
        """The stage's record count when every key is null, 0 when none is, else None: count."""
        self.timestamps = timestamps


def _groups(parts: np.ndarray):
    """(partition, record indices in send order, whether they are one contiguous range)."""
    n = len(parts)
    if n and (parts == parts[0]).all():
        yield int(parts[0]), np.arange(n), True
        return
    order = np.argsort(parts, kind="stable")
    ordered = parts[order]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    for idx in np.split(order, bounds):
        yield int(parts[idx[0]]), idx, False


def _runs(parts: np.ndarray):
    """(partition, record indices, True) for each stretch of consecutive records on one partition."""
    bounds = [0, *(np.flatnonzero(np.diff(parts)) + 1).tolist(), len(parts)]
    for start, end in zip(bounds, bounds[1:]):
        yield int(parts[start]), np.arange(start, end), True


def _pieces(idx: np.ndarray, sizes: np.ndarray, target: int, contiguous: bool):
    """Cut ``idx`` into runs whose sizes sum to at most ``target`` (a larger record runs alone)."""
    cum = np.cumsum(sizes[idx])
    if cum[-1] <= target:
        yield idx, contiguous
        return
    start, m, before = 0, len(idx), 0
    while start < m:
        end = int(np.searchsorted(cum, before + target, side="right"))
        end = max(end, start + 1)
        yield idx[start:end], contiguous
        before = int(cum[end - 1])
        start = end
