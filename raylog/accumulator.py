"""RecordAccumulator: per-partition batch building for the producer, and the futures it hands out.

Records appended with send() collect in one open batch per partition until
it reaches batch_size or lingers linger_ms; send_batch() hands in whole
column sets that are cut into batch_size pieces at once. A batch is encoded
(columnar msgpack + lz4 + CRC, raylog.storage.batch) when it closes, and its
producer sequence is assigned then, under the lock: sequences follow the
order batches enter the partition's ready queue, which is the order the
sender sends them.

Thread-safe: user threads append, the sender thread drains; one Condition
guards everything and wakes the sender and flush().
"""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from raylog.config import ProducerConfig
from raylog.errors import KafkaTimeoutError
from raylog.records import RecordMetadata, TopicPartition
from raylog.storage import batch as record_batch

RECORD_OVERHEAD_BYTES = 8
"""Estimated per-record payload bytes beyond key and value (msgpack tags, timestamp delta)."""


class ProduceRequestResult:
    """Outcome of one batch, shared by the futures of all its records."""

    __slots__ = ("_event", "topic", "partition", "base_offset", "log_append_time", "error", "_callbacks")

    def __init__(self, tp: TopicPartition):
        self._event = threading.Event()
        self.topic, self.partition = tp
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._callbacks: list | None = None

    def complete(self, base_offset: int, log_append_time: int = -1, error: BaseException | None = None) -> None:
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        self._event.set()
        for cb in self._callbacks or ():
            cb()

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None) -> None:
        if not self._event.wait(timeout):
            raise KafkaTimeoutError(f"no produce response for {self.topic}-{self.partition} within {timeout}s")

    def on_done(self, cb) -> None:
        if self._event.is_set():
            cb()
        else:
            self._callbacks = (self._callbacks or []) + [cb]


class FutureRecordMetadata:
    """kafka-python's future for one record: get(timeout) -> RecordMetadata, or raises the batch's error."""

    __slots__ = ("_result", "_relative_offset", "_timestamp")

    def __init__(self, result: ProduceRequestResult, relative_offset: int, timestamp: int):
        self._result = result
        self._relative_offset = relative_offset
        self._timestamp = timestamp

    def get(self, timeout: float | None = None) -> RecordMetadata:
        r = self._result
        r.wait(timeout)
        if r.error is not None:
            raise r.error
        offset = -1 if r.base_offset < 0 else r.base_offset + self._relative_offset
        ts = r.log_append_time if r.log_append_time >= 0 else self._timestamp
        return RecordMetadata(r.topic, r.partition, offset, ts)

    def is_done(self) -> bool:
        return self._result.done()

    def succeeded(self) -> bool:
        return self._result.done() and self._result.error is None

    def failed(self) -> bool:
        return self._result.done() and self._result.error is not None

    def exception(self) -> BaseException | None:
        return self._result.error

    def add_callback(self, fn) -> "FutureRecordMetadata":
        """Call fn(RecordMetadata) once the record is acknowledged (on the sender thread)."""
        self._result.on_done(lambda: fn(self.get(0)) if self._result.error is None else None)
        return self

    def add_errback(self, fn) -> "FutureRecordMetadata":
        self._result.on_done(lambda: fn(self._result.error) if self._result.error is not None else None)
        return self


class FutureBatchMetadata:
    """The future of a send_batch(): get() returns one RecordMetadata per record, in input order."""

    __slots__ = ("_parts", "_count", "_timestamps")

    def __init__(self, parts: list[tuple[ProduceRequestResult, np.ndarray]], count: int, timestamps):
        self._parts = parts
        self._count = count
        self._timestamps = timestamps

    def wait(self, timeout: float | None = None) -> None:
        """Block until every batch is acknowledged; raise the first batch's error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for result, _ in self._parts:
            result.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if result.error is not None:
                raise result.error

    def offsets(self, timeout: float | None = None) -> np.ndarray:
        """Each record's offset as an int64 array in input order (-1 with acks=0)."""
        self.wait(timeout)
        out = np.empty(self._count, dtype=np.int64)
        for result, indices in self._parts:
            out[indices] = -1 if result.base_offset < 0 else result.base_offset + np.arange(len(indices))
        return out

    def get(self, timeout: float | None = None) -> list[RecordMetadata]:
        offsets = self.offsets(timeout)
        meta = [None] * self._count
        for result, indices in self._parts:
            for i in indices.tolist():
                ts = result.log_append_time if result.log_append_time >= 0 else self._timestamps[i]
                meta[i] = RecordMetadata(result.topic, result.partition, int(offsets[i]), ts)
        return meta

    def is_done(self) -> bool:
        return all(r.done() for r, _ in self._parts)


class ProducerBatch:
    __slots__ = ("tp", "keys", "values", "timestamps", "headers", "size", "created", "result",
                 "records", "base_sequence", "attempts", "retry_at")

    def __init__(self, tp: TopicPartition, now: float):
        self.tp = tp
        self.keys: list = []
        self.values: list = []
        self.timestamps: list = []
        self.headers: list | None = None
        self.size = 0
        self.created = now
        self.result = ProduceRequestResult(tp)
        self.records: np.ndarray | None = None
        """The encoded batch, once closed: what the sender ships."""
        self.base_sequence = -1
        self.attempts = 0
        self.retry_at = 0.0

    def __len__(self) -> int:
        return len(self.values)


class RecordAccumulator:
    def __init__(self, config: ProducerConfig, producer_id: int):
        self.config = config
        self.producer_id = producer_id
        self._cond = threading.Condition()
        self._open: dict[TopicPartition, ProducerBatch] = {}
        self._ready: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._next_sequence: dict[TopicPartition, int] = {}
        self._buffered_bytes = 0
        self._incomplete = 0
        self._flushing = 0
        self.closed = False

    # --- appending (user threads) ---------------------------------------------------------

    def _reserve(self, nbytes: int) -> None:
        """Block while the buffer is full (up to max_block_ms). Caller holds the lock."""
        if self._buffered_bytes + nbytes <= self.config.buffer_memory or self._buffered_bytes == 0:
            self._buffered_bytes += nbytes
            return
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while self._buffered_bytes + nbytes > self.config.buffer_memory and self._buffered_bytes > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"buffer_memory ({self.config.buffer_memory} bytes) stayed full "
                                        f"for max_block_ms ({self.config.max_block_ms} ms)")
            self._cond.wait(remaining)
        self._buffered_bytes += nbytes

    def append(self, tp: TopicPartition, key, value, timestamp: int, headers) -> tuple[FutureRecordMetadata, bool]:
        """Add one record; returns its future and whether this record closed the partition's batch."""
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0) + RECORD_OVERHEAD_BYTES
        with self._cond:
            self._reserve(size)
            batch = self._open.get(tp)
            if batch is None:
                batch = self._open[tp] = ProducerBatch(tp, time.monotonic())
                self._incomplete += 1
                self._cond.notify_all()
            n = len(batch.values)
            batch.keys.append(key)
            batch.values.append(value)
            batch.timestamps.append(timestamp)
            if headers:
                if batch.headers is None:
                    batch.headers = [None] * n
                batch.headers.append(headers)
            elif batch.headers is not None:
                batch.headers.append(None)
            batch.size += size
            future = FutureRecordMetadata(batch.result, n, timestamp)
            full = batch.size >= self.config.batch_size
            if full:
                self._close(batch)
            return future, full

    def append_columns(self, tp: TopicPartition, keys: list, values: list, timestamps: list,
                       headers: list | None, size: int) -> ProduceRequestResult:
        """Add one ready-made batch of records (send_batch); it is closed at once."""
        with self._cond:
            self._reserve(size)
            open_batch = self._open.get(tp)
            if open_batch is not None:
                self._close(open_batch)  # keep record order: earlier send()s go first
            batch = ProducerBatch(tp, time.monotonic())
            batch.keys, batch.values, batch.timestamps, batch.headers, batch.size = keys, values, timestamps, headers, size
            self._incomplete += 1
            self._close(batch)
            return batch.result

    def _close(self, batch: ProducerBatch) -> None:
        """Encode, assign the sequence and queue for sending. Caller holds the lock."""
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
        seq = self._next_sequence.get(batch.tp, 0)
        batch.base_sequence = seq
        self._next_sequence[batch.tp] = (seq + len(batch)) & 0x7FFFFFFF
        idempotent = self.config.enable_idempotence
        encoded = record_batch.build(
            batch.values, batch.keys, batch.timestamps, batch.headers, self.config.compression_type,
            producer_id=self.producer_id if idempotent else record_batch.NO_PRODUCER_ID,
            producer_epoch=0 if idempotent else -1, base_sequence=seq if idempotent else -1)
        batch.records = np.frombuffer(encoded, dtype=np.uint8)
        batch.keys = batch.values = batch.headers = None  # the encoded bytes are all that is sent
        self._ready.setdefault(batch.tp, deque()).append(batch)
        self._cond.notify_all()

    # --- draining (sender thread) ----------------------------------------------------------

    def drain(self, admit) -> list[ProducerBatch]:
        """Close batches that lingered long enough (or all, when flushing), then pop the ones
        ``admit(tp)`` lets through (it counts them in flight when it says yes)."""
        now = time.monotonic()
        linger = self.config.linger_ms / 1000
        out = []
        with self._cond:
            for batch in list(self._open.values()):
                if self._flushing or self.closed or now - batch.created >= linger:
                    self._close(batch)
            for tp, queue in self._ready.items():
                while queue and queue[0].retry_at <= now and admit(tp):
                    out.append(queue.popleft())
        return out

    def next_deadline(self) -> float | None:
        """Monotonic time the sender must wake at to close a lingering batch, if any."""
        with self._cond:
            if any(self._ready.values()):
                return time.monotonic()
            if not self._open:
                return None
            return min(b.created for b in self._open.values()) + self.config.linger_ms / 1000

    def wait_for_work(self, timeout: float) -> None:
        with self._cond:
            if not any(self._ready.values()) and not (self._open and (self._flushing or self.closed)):
                self._cond.wait(timeout)

    def requeue(self, batch: ProducerBatch, delay_s: float) -> None:
        """Put a failed batch back for a retry, in sequence order ahead of later batches."""
        with self._cond:
            batch.retry_at = time.monotonic() + delay_s
            queue = self._ready.setdefault(batch.tp, deque())
            queue.appendleft(batch)
            if len(queue) > 1:
                ordered = sorted(queue, key=lambda b: b.base_sequence)
                queue.clear()
                queue.extend(ordered)
            self._cond.notify_all()

    def completed(self, batch: ProducerBatch) -> None:
        with self._cond:
            self._buffered_bytes -= batch.size
            self._incomplete -= 1
            self._cond.notify_all()

    # --- flush / close ---------------------------------------------------------------------

    def flush(self, timeout: float | None) -> None:
        """Send everything buffered now and wait until every batch has its outcome."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._incomplete > 0:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise KafkaTimeoutError(f"flush did not complete within {timeout}s")
                    self._cond.wait(remaining if remaining is not None else 0.1)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def has_pending(self) -> bool:
        with self._cond:
            return self._incomplete > 0

    def abort_all(self, error: BaseException) -> None:
        """Fail every batch not yet sent (close with a timeout that ran out)."""
        with self._cond:
            batches = list(self._open.values()) + [b for q in self._ready.values() for b in q]
            self._open.clear()
            self._ready.clear()
        for b in batches:
            b.result.complete(-1, -1, error)
            self.completed(b)
