"""What send() and send_batch() hand back: futures that cost nothing until asked.

Every record appended to one staged run of a topic (see accumulator.py)
shares one ``ProduceResult``; a record's future is just ``(result, index)``,
a tuple built in C. The sender fills the result as each partition batch of
the run completes (offsets, or the batch's error for its records only) and
marks it done when the last one has; ``get()`` on a done result builds that
record's RecordMetadata from the run's columns without waiting on anything.

Callbacks (``add_callback`` / ``add_errback``, kafka-python's names) run on
one callback thread per producer, never on the sender thread, and an
exception a callback raises is logged and dropped: a user's callback can
neither stall nor kill the sender.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from array import array

import numpy as np

from raylog.errors import KafkaTimeoutError
from raylog.records import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__


def _int64s(values: np.ndarray) -> array:
    return array("q", np.ascontiguousarray(values, dtype=np.int64).tobytes())


class ProduceResult:
    """Outcome of one staged run of records: one offset (or error) per record.

    Written by the sender thread; read by any thread once ``done`` is True
    (the GIL orders the writes before the flag).
    """

    __slots__ = ("topic", "count", "partitions", "timestamps", "offsets", "append_times", "error_index",
                 "errors", "pending", "done", "metadata_columns", "sizes", "_event", "_callbacks",
                 "_runner")

    def __init__(self, topic: str, timestamps, runner: "CallbackRunner"):
        self.topic = topic
        self.count = 0
        """Records in the run; known once the run is closed and cut."""
        self.partitions: list[int] | None = None
        """Each record's partition, set when the run is cut into partition batches."""
        self.timestamps = timestamps
        """The records' timestamps in ms: a list or an array, or one int shared by all."""
        self.offsets: np.ndarray | None = None
        self.append_times: np.ndarray | None = None
        """Broker timestamps of records in LogAppendTime topics (else None)."""
        self.error_index: np.ndarray | None = None
        """Per record, the index into ``errors`` of its batch's error, or -1."""
        self.errors: list[BaseException] = []
        self.pending = -1
        """Partition batches not yet completed; -1 until the run is cut."""
        self.done = False
        self.metadata_columns: tuple | None = None
        """The RecordMetadata fields of every record as columns, made on the first one asked for."""
        self.sizes: tuple | None = None
        """Per record (serialized key size, value size, header size) arrays, -1 where absent
        (kafka-python's RecordMetadata fields), set when the run is cut."""
        self._event: threading.Event | None = None
        self._callbacks: list | None = None
        self._runner = runner

    # --- written by the sender -------------------------------------------------------------

    def set_batches(self, partitions: list[int], batch_count: int, sizes: tuple | None = None) -> None:
        self.count = len(partitions)
        self.sizes = sizes
        self.offsets = np.full(self.count, -1, dtype=np.int64)
        self.partitions = partitions
        self.pending = batch_count
        if batch_count == 0:
            self._finish()

    def complete_batch(self, indices: np.ndarray, base_offset: int, log_append_time: int = -1) -> None:
        if base_offset >= 0:
            self.offsets[indices] = np.arange(base_offset, base_offset + len(indices), dtype=np.int64)
        if log_append_time >= 0:
            if self.append_times is None:
                self.append_times = np.full(self.count, -1, dtype=np.int64)
            self.append_times[indices] = log_append_time
        self._settle()

    def fail_batch(self, indices: np.ndarray, error: BaseException) -> None:
        if self.error_index is None:
            self.error_index = np.full(self.count, -1, dtype=np.int32)
        self.error_index[indices] = len(self.errors)
        self.errors.append(error)
        self._settle()

    def fail_all(self, count: int, error: BaseException) -> None:
        """Fail a run that was never cut into batches (closed producer, bad metadata)."""
        self.set_batches([-1] * count, 1)
        self.fail_batch(np.arange(count), error)

    def _settle(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self._finish()

    def _finish(self) -> None:
        with _CALLBACK_LOCK:
            self.done = True
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        if callbacks:
            self._runner.submit(self, callbacks)

    # --- read by futures -------------------------------------------------------------------

    def wait(self, timeout: float | None) -> None:
        if self.done:
            return
        with _CALLBACK_LOCK:
            if not self.done and self._event is None:
                self._event = threading.Event()
            event = self._event
        if not self.done and not event.wait(timeout):
            raise KafkaTimeoutError(f"records to {self.topic!r} were not acknowledged within {timeout}s")

    def error(self, i: int) -> BaseException | None:
        if self.error_index is None:
            return None
        e = self.error_index[i]
        return self.errors[e] if e >= 0 else None

    def _metadata_columns(self) -> tuple:
        """The run's RecordMetadata fields as columns (array.array: 8 bytes a record each, and an
        index is a Python int), converted from their numpy arrays at once on the first per-record
        get(). Each RecordMetadata is built when asked for and is garbage once the caller drops
        it: kept for a whole run, 200,000 of them (tuple subclasses, which the cyclic collector
        tracks) held 38 MB and set off its full passes over every live object (issue 33)."""
        n, topic = self.count, self.topic
        stamps = self.timestamps
        if self.append_times is not None:
            stamps = _int64s(np.where(self.append_times >= 0, self.append_times, np.asarray(stamps, dtype=np.int64)))
        elif isinstance(stamps, int):
            stamps = array("q", [stamps]) * n
        elif isinstance(stamps, np.ndarray):
            stamps = _int64s(stamps)
        parts = self.partitions
        tps = {p: TopicPartition(topic, p) for p in set(parts)}
        ks, vs, hs = (array("q", [-1]) * n,) * 3 if self.sizes is None else (_int64s(a) for a in self.sizes)
        self.metadata_columns = columns = (topic, parts, tps, _int64s(self.offsets), stamps, ks, vs, hs)
        return columns

    def metadata(self, i: int) -> RecordMetadata:
        topic, parts, tps, offsets, stamps, ks, vs, hs = self.metadata_columns or self._metadata_columns()
        p = parts[i]
        return _new_tuple(RecordMetadata, (topic, p, tps[p], offsets[i], stamps[i], None, ks[i], vs[i], hs[i]))

    def add_callback(self, index: int | None, fn, on_error: bool) -> None:
        """Run ``fn`` on the callback thread once done: with the record's metadata (or the
        batch-run's list of metadata when ``index`` is None) on success, else with its error."""
        with _CALLBACK_LOCK:
            if not self.done:
                self._callbacks = (self._callbacks or []) + [(index, fn, on_error)]
                return
        self._runner.submit(self, [(index, fn, on_error)])


_CALLBACK_LOCK = threading.Lock()
"""Guards registration against completion (a callback added as the batch completes runs once)."""


CALLBACK_THREAD_IDLE_S = 1.0
"""A producer's callback thread ends after this long without a callback to run (the next one starts
it again), so a producer, closed or not, keeps no thread for callbacks it no longer gets."""


class CallbackRunner:
    """One daemon thread per producer that runs user callbacks, isolated from the sender."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._queued = 0
        self._idle = threading.Condition(self._lock)

    def submit(self, result: ProduceResult, callbacks: list) -> None:
        with self._lock:
            self._queued += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="raylog-producer-callbacks", daemon=True)
                self._thread.start()
        self._queue.put((result, callbacks))

    def _run(self) -> None:
        while True:
            try:
                result, callbacks = self._queue.get(timeout=CALLBACK_THREAD_IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._queued == 0:
                        self._thread = None
                        return
                continue
            for index, fn, on_error in callbacks:
                try:
                    self._call(result, index, fn, on_error)
                except Exception:  # noqa: BLE001 - a user's callback must never reach the producer
                    log.exception("raylog producer callback %r raised; the producer carries on", fn)
            with self._lock:
                self._queued -= 1
                if self._queued == 0:
                    self._idle.notify_all()

    @staticmethod
    def _call(result: ProduceResult, index, fn, on_error: bool) -> None:
        if index is None:
            error = next((e for e in result.errors), None)
            if on_error and error is not None:
                fn(error)
            elif not on_error and error is None:
                fn([result.metadata(i) for i in range(result.count)])
            return
        error = result.error(index)
        if on_error and error is not None:
            fn(error)
        elif not on_error and error is None:
            fn(result.metadata(index))

    def drain(self, deadline: float | None) -> None:
        """Wait until every submitted callback has run (flush() returns after callbacks)."""
        with self._lock:
            while self._queued:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise KafkaTimeoutError("producer callbacks did not finish before the flush timeout")
                self._idle.wait(remaining)


def _bind(fn, args, kwargs):
    return functools.partial(fn, *args, **kwargs) if args or kwargs else fn


class FutureRecordMetadata(tuple):
    """kafka-python's future for one record: ``get(timeout)`` -> RecordMetadata, or raises its error."""

    __slots__ = ()

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once acknowledged; raises its batch's error, or
        KafkaTimeoutError after ``timeout`` seconds."""
        result, i = self
        if result.metadata_columns is not None and result.error_index is None:
            return result.metadata(i)
        result.wait(timeout)
        error = result.error(i)
        if error is not None:
            raise error
        return result.metadata(i)

    @property
    def is_done(self) -> bool:
        return self[0].done

    def succeeded(self) -> bool:
        result, i = self
        return result.done and result.error(i) is None

    def failed(self) -> bool:
        result, i = self
        return result.done and result.error(i) is not None

    @property
    def exception(self) -> BaseException | None:
        result, i = self
        return result.error(i) if result.done else None

    def add_callback(self, fn, *args, **kwargs) -> "FutureRecordMetadata":
        """Call ``fn(*args, metadata, **kwargs)`` on the callback thread once acknowledged."""
        self[0].add_callback(self[1], _bind(fn, args, kwargs), on_error=False)
        return self

    def add_errback(self, fn, *args, **kwargs) -> "FutureRecordMetadata":
        """Call ``fn(*args, exception, **kwargs)`` on the callback thread if the record fails."""
        self[0].add_callback(self[1], _bind(fn, args, kwargs), on_error=True)
        return self

    def add_both(self, fn, *args, **kwargs) -> "FutureRecordMetadata":
        self.add_callback(fn, *args, **kwargs)
        return self.add_errback(fn, *args, **kwargs)


class FutureBatchMetadata:
    """The future of a send_batch(): one outcome per record, in input order."""

    __slots__ = ("_result",)

    def __init__(self, result: ProduceResult):
        self._result = result

    def wait(self, timeout: float | None = None) -> None:
        """Block until every record has its outcome; raise the first failed batch's error."""
        result = self._result
        result.wait(timeout)
        if result.errors:
            raise result.errors[0]

    def offsets(self, timeout: float | None = None) -> np.ndarray:
        """Each record's offset as an int64 array in input order (-1 with acks=0)."""
        self.wait(timeout)
        return self._result.offsets.copy()

    def partitions(self, timeout: float | None = None) -> np.ndarray:
        """Each record's partition as an int64 array in input order."""
        self.wait(timeout)
        return np.asarray(self._result.partitions, dtype=np.int64)

    def get(self, timeout: float | None = None) -> list[RecordMetadata]:
        self.wait(timeout)
        result = self._result
        return [result.metadata(i) for i in range(result.count)]

    def errors(self) -> list[BaseException]:
        """The distinct errors of failed batches (empty when all succeeded or not yet done)."""
        return list(self._result.errors)

    def is_done(self) -> bool:
        return self._result.done

    def add_callback(self, fn, *args, **kwargs) -> "FutureBatchMetadata":
        """Call ``fn(*args, [RecordMetadata, ...], **kwargs)`` once every record is acknowledged."""
        self._result.add_callback(None, _bind(fn, args, kwargs), on_error=False)
        return self

    def add_errback(self, fn, *args, **kwargs) -> "FutureBatchMetadata":
        self._result.add_callback(None, _bind(fn, args, kwargs), on_error=True)
        return self
