"""RecordAccumulator: where send() puts records until the sender takes them.

send() appends a record to its topic's open *stage*: parallel lists of keys,
values and timestamps (plus partitions and headers when any record has
them), in send order. No partitioning happens here: the sender cuts a
closed stage into partition batches in one vectorized pass (murmur2 of all
its keys at once, grouped and cut by bytes; batch_builder.py), which is what
makes a keyed send() cost a few list appends instead of a pure-Python hash
per record. A stage closes when it holds enough bytes to give each of its
partitions a full batch, when it has lingered linger_ms, on flush() and
before a send_batch() to the same topic (which arrives as a closed stage of
its own), so records keep their send order within each partition.

Memory: every record's bytes are reserved against buffer_memory when it is
appended and released when its batch completes; send() blocks up to
max_block_ms while the buffer is full. An open stage also holds up to
batch_size bytes of *credit* reserved ahead from what is free, which send()'s
fast path spends without touching the shared count (its three additions of
large ints were a fifth of the append: issue 33); the credit goes back when
the stage closes, and at once whenever a record would otherwise wait for room,
so credit never makes a send() block.

Hand-off: the send() after one that filled a stage waits (up to
HANDOFF_WAIT_S) until the sender has cut the closed stages and offered their
batches for sending. Under CPython's GIL a caller looping on send() never
blocks, so a sender thread that releases the GIL (a numpy call, an lz4
block, a socket write) gets it back only after the 5 ms switch interval:
a 38,751-record stage took 203 ms to cut so, against 8 ms alone (0.2 us a
record), and no batch left before the loop ended (issue 33, traced). The wait costs the loop the cut's
own CPU, which the two threads share one GIL for anyway, and the replicas
append a stage while the next one fills. Only a filled stage hands off: a
caller that also waited for stages closed at linger let the sender close
them on time, into more and smaller stages, and was slower.

Thread-safe: user threads append under one lock (one acquisition per
record); the sender thread takes closed stages and closes lingering ones.
"""

from __future__ import annotations

import threading
import time
from typing import Callable
from collections import deque

from raylog.config import ProducerConfig
from raylog.errors import IllegalStateError, InvalidPartitionError, KafkaTimeoutError
from raylog.producer.futures import CallbackRunner, FutureRecordMetadata, ProduceResult
from raylog.metadata import Metadata, TopicInfo

RECORD_OVERHEAD_BYTES = 16
"""Payload bytes per record beyond key and value: two int32 offsets and an int64 timestamp delta."""

MAX_DEFER_S = 0.05
"""How long past linger_ms a stage keeps filling while its topic's earlier batches are still in
flight. A Ray call costs ~0.5 ms of the caller's CPU whatever its size (bench/client_bench.py's
driver CPU column), so under load a stage closed every linger_ms turns into many small calls, one
per partition; waiting for the calls in flight makes fewer, larger ones. Idle producers are not
affected: with nothing in flight a stage closes at linger_ms."""
OUTSTANDING_SWEEP = 1024
"""Every this many results remembered for flush(), the completed ones are dropped wherever they are."""
HANDOFF_WAIT_S = 0.25
"""Longest a send() waits for the sender to take up a stage that send() filled (module doc). It
only paces the two threads: past it the send() goes on, and a sender held up elsewhere (a metadata
call) delays one send() per filled stage by this much, not each."""
MAX_STAGE_SPREAD = 16
"""A stage of keyed records closes at batch_size times its partition count, at most this many
times batch_size, so each partition's batch is close to batch_size without unbounded stages."""


class Stage:
    """Records of one topic in send order, not yet cut into partition batches."""

    __slots__ = ("topic", "info", "keys", "values", "timestamps", "partitions", "headers", "nbytes",
                 "created", "result", "close_at", "keyed", "plain", "closed", "clock_ns", "reserved")

    def __init__(self, topic: str, info: TopicInfo, config: ProducerConfig, runner: CallbackRunner):
        self.topic = topic
        self.info = info
        self.keys: list = []
        self.values: list = []
        self.timestamps: list | int = []
        self.partitions: list | None = None
        """Explicit partition per record (-1: the partitioner decides); None while no record has one."""
        self.headers: list | None = None
        self.nbytes = 0
        self.reserved = 0
        """Bytes of buffer_memory this stage holds: its records' (nbytes) and, while open, its credit."""
        self.created = time.monotonic()
        self.result = ProduceResult(topic, self.timestamps, runner)
        self.close_at = min(config.batch_size * min(info.num_partitions, MAX_STAGE_SPREAD),
                            max(config.batch_size, config.buffer_memory // 4))
        """Bytes at which the stage closes: a full batch for each of its partitions (unkeyed records
        are cut into batch_size runs over the partitions, keyed ones spread by their keys)."""
        self.keyed = True
        """False only when the caller knows no record has a key (a send_batch without keys)."""
        self.plain = True
        """No record so far has headers, an explicit partition or an explicit timestamp (send()'s
        fast path applies)."""
        self.closed = False
        self.clock_ns = False
        """``timestamps`` are time.time_ns() readings, cut to milliseconds with the stage: send()'s
        records, whose per-record division was as costly as reading the clock (issue 33)."""

    def to_millis(self) -> None:
        """A record with its own timestamp (in ms) joins a stage of clock readings."""
        if self.clock_ns:
            self.timestamps[:] = [t // 1_000_000 for t in self.timestamps]
            self.clock_ns = False
            self.plain = False

    def __len__(self) -> int:
        return len(self.values)


class RecordAccumulator:
    def __init__(self, config: ProducerConfig, metadata: Metadata, runner: CallbackRunner,
                 create_topic: Callable[[str], None] | None = None):
        self.config = config
        self._metadata = metadata
        self._create_topic = create_topic
        """Auto-creation of a topic that does not exist (None: not allowed)."""
        self._metadata_max_age_s = config.metadata_max_age_ms / 1000
        self._runner = runner
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._open: dict[str, Stage] = {}
        self._closed_stages: deque[Stage] = deque()
        self._outstanding: deque[ProduceResult] = deque()
        self._buffered = 0
        """Bytes reserved: records not yet completed, and the open stages' credit."""
        self._buffer_memory = config.buffer_memory
        self._credit = min(config.batch_size, config.buffer_memory)
        """Most credit a stage takes at once."""
        self.wakeup = threading.Event()
        """Set whenever the sender has something new to do (a closed stage, a flush, close)."""
        self.closed = False
        self._closed_by: IllegalStateError | None = None
        self._handed = 0
        """Stages closed so far (handed to the sender)."""
        self._taken = 0
        self._offered = 0
        """Of the stages handed, how many the sender has cut and offered for sending."""
        self._filled = False
        """A send() filled a stage: the next one waits for the sender to take it up."""
        self._sender_ready = threading.Condition(self._lock)

    # --- appending (user threads) -----------------------------------------------------------

    def _reserve(self, nbytes: int) -> None:
        """Block while the buffer is full, up to max_block_ms; caller holds the lock. A request
        larger than the whole buffer goes through once the buffer is empty."""
        if self._buffered + nbytes > self._buffer_memory and self._buffered > 0:
            deadline = time.monotonic() + self.config.max_block_ms / 1000
            while self._reclaim() + nbytes > self._buffer_memory and self._buffered > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"buffer_memory ({self.config.buffer_memory} bytes) stayed full for max_block_ms "
                        f"({self.config.max_block_ms} ms); nothing was queued")
                self._space.wait(remaining)
        self._buffered += nbytes

    def _reclaim(self) -> int:
        """Take back every open stage's credit; returns the bytes then reserved. Caller holds the lock."""
        for stage in self._open.values():
            self._return_credit(stage)
        return self._buffered

    def _return_credit(self, stage: Stage) -> None:
        if stage.reserved > stage.nbytes:
            self._buffered -= stage.reserved - stage.nbytes
            stage.reserved = stage.nbytes
            self._space.notify_all()  # a waiting send() may fit now

    def _grant(self, stage: Stage, size: int) -> None:
        """``size`` bytes, already reserved, join ``stage``, with what is free up to the credit.
        Caller holds the lock."""
        extra = max(0, min(self._credit, self._buffer_memory - self._buffered))
        self._buffered += extra
        stage.reserved += size + extra

    def release(self, nbytes: int) -> None:
        """A batch completed: its bytes leave the buffer."""
        with self._lock:
            self._buffered -= nbytes
            self._space.notify_all()

    def topic_info(self, topic: str) -> TopicInfo:
        return self._metadata.topic(topic, self._metadata_max_age_s, self._create_topic)

    def available_bytes(self) -> int:
        """buffer_memory not taken by records (the open stages' credit counts as available)."""
        with self._lock:
            credit = sum(stage.reserved - stage.nbytes for stage in self._open.values())
            return max(0, self._buffer_memory - self._buffered + credit)

    def _track(self, result: ProduceResult) -> None:
        """Remember a result until it completes, for flush(); forget the completed ones at the head, so
        a producer that never flushes holds only what is still in flight. Caller holds the lock."""
        outstanding = self._outstanding
        while outstanding and outstanding[0].done:
            outstanding.popleft()
        if len(outstanding) >= OUTSTANDING_SWEEP and len(outstanding) % OUTSTANDING_SWEEP == 0:
            # One slow result at the head (a batch being retried) must not keep the done ones behind it.
            self._outstanding = outstanding = deque(r for r in outstanding if not r.done)
        outstanding.append(result)

    def _new_stage(self, topic: str, info: TopicInfo) -> Stage:
        """Caller holds the lock."""
        stage = self._open[topic] = Stage(topic, info, self.config, self._runner)
        stage.clock_ns = True
        self._track(stage.result)
        self.wakeup.set()  # the sender sleeps until it knows of a stage to linger on
        return stage

    def plain_send(self, fallback: Callable[..., FutureRecordMetadata]) -> Callable[..., FutureRecordMetadata]:
        """send() for a producer with no serializer and no partitioner. A record of bytes (key None
        or bytes) with no headers, partition or timestamp goes into its topic's open stage within
        this one call: one lock acquisition, three list appends, one tuple, stamped with the clock
        when send() was called. Any other record goes to ``fallback`` (the producer's full send(),
        called with the same six arguments); one that no open stage has credit for, to
        append_record()."""
        lock, opened, append_record, time_ns = self._lock, self._open, self.append_record, time.time_ns
        max_size, overhead = self.config.max_request_size, RECORD_OVERHEAD_BYTES

        def send(topic: str, value=None, key=None, headers=None, partition: int | None = None,
                 timestamp_ms: int | None = None) -> FutureRecordMetadata:
            if (type(value) is not bytes or headers is not None or partition is not None
                    or timestamp_ms is not None or (key is not None and type(key) is not bytes)):
                return fallback(topic, value, key, headers, partition, timestamp_ms)
            size = len(value) + (overhead if key is None else overhead + len(key))
            if size > max_size:
                return fallback(topic, value, key, headers, partition, timestamp_ms)
            now_ns = time_ns()
            lock.acquire()
            try:
                stage = opened.get(topic)
                if stage is None or not stage.plain:
                    stage = None
                else:
                    nbytes = stage.nbytes + size
                    if nbytes > stage.reserved:
                        stage = None  # out of credit
                    else:
                        i = len(stage.values)
                        stage.keys.append(key)
                        stage.values.append(value)
                        stage.timestamps.append(now_ns)
                        stage.nbytes = nbytes
                        if nbytes >= stage.close_at:
                            self._close(stage)
                            self._filled = True
            finally:
                lock.release()
            if stage is None:
                return append_record(topic, key, value, None, None, None, size, now_ns)
            # Calling the class costs 48 ns less than tuple.__new__(cls, ...) on CPython 3.11
            # (195 against 243 ns, issue 33).
            return FutureRecordMetadata((stage.result, i))

        return send

    def append_record(self, topic: str, key, value, timestamp_ms: int | None, headers, partition,
                      size: int, now_ns: int) -> FutureRecordMetadata:
        """Add one record, with headers, an explicit partition or timestamp (None: ``now_ns``, the
        clock when send() was called), and return its future."""
        if self._filled:
            self._await_sender()
        stage = self._open.get(topic)
        info = stage.info if stage is not None else self.topic_info(topic)
        with self._lock:
            if self.closed:
                raise self._refusal()
            if partition is not None and not 0 <= partition < info.num_partitions:
                raise InvalidPartitionError(
                    f"topic {topic!r} has partitions 0..{info.num_partitions - 1}, not {partition!r}")
            stage = self._open.get(topic)
            if stage is None or stage.nbytes + size > stage.reserved:
                self._reserve(size)
                stage = self._open.get(topic)  # _reserve may have waited
                if stage is None:
                    stage = self._new_stage(topic, info)
                self._grant(stage, size)
            i = len(stage.values)
            if partition is not None or headers is not None:
                stage.plain = False
            if partition is not None:
                if stage.partitions is None:
                    stage.partitions = [-1] * i
                stage.partitions.append(partition)
            elif stage.partitions is not None:
                stage.partitions.append(-1)
            if headers is not None:
                if stage.headers is None:
                    stage.headers = [None] * i
                stage.headers.append(headers)
            elif stage.headers is not None:
                stage.headers.append(None)
            if timestamp_ms is not None:
                stage.to_millis()
            stage.keys.append(key)
            stage.values.append(value)
            stage.timestamps.append(timestamp_ms if timestamp_ms is not None
                                    else now_ns if stage.clock_ns else now_ns // 1_000_000)
            stage.nbytes += size
            if stage.nbytes >= stage.close_at:
                self._close(stage)
                self._filled = True
        return FutureRecordMetadata((stage.result, i))

    def append_stage(self, topic: str, info: TopicInfo, keys, values, timestamps, headers, partitions,
                     size: int, keyed: bool) -> ProduceResult:
        """Queue a whole run of records at once (send_batch): all of it or, on KafkaTimeoutError
        while the buffer stays full, none of it."""
        stage = Stage(topic, info, self.config, self._runner)
        stage.keys, stage.values, stage.timestamps = keys, values, timestamps
        stage.headers, stage.partitions, stage.nbytes, stage.keyed = headers, partitions, size, keyed
        stage.reserved = size
        stage.result = ProduceResult(topic, timestamps, self._runner)
        with self._lock:
            if self.closed:
                raise self._refusal()
            self._reserve(size)
            earlier = self._open.get(topic)
            if earlier is not None:
                self._close(earlier)  # keep order: earlier send()s to this topic go first
            self._track(stage.result)
            self._close(stage)
        return stage.result

    def _close(self, stage: Stage) -> None:
        """Hand a stage to the sender. Caller holds the lock."""
        if self._open.get(stage.topic) is stage:
            del self._open[stage.topic]
        self._return_credit(stage)
        stage.closed = True
        self._closed_stages.append(stage)
        self._handed += 1
        self.wakeup.set()

    def _await_sender(self) -> None:
        """Wait until the sender has offered every stage handed so far, up to HANDOFF_WAIT_S (or
        max_block_ms, when less: a caller that set it to 0 expects send() never to wait)."""
        deadline = time.monotonic() + min(HANDOFF_WAIT_S, self.config.max_block_ms / 1000)
        with self._lock:
            self._filled = False
            handed = self._handed
            while self._offered < handed and not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._sender_ready.wait(remaining)

    # --- the sender's side --------------------------------------------------------------------

    def take_closed(self) -> list[Stage]:
        with self._lock:
            stages = list(self._closed_stages)
            self._closed_stages.clear()
            self._taken = self._handed
            return stages

    def offered(self) -> None:
        """The sender has cut every stage it took and offered their batches for sending."""
        if self._offered != self._taken:
            with self._lock:
                self._offered = self._taken
                self._sender_ready.notify_all()

    def close_lingering(self, now: float, busy=None) -> float | None:
        """Close stages that lingered linger_ms; returns the monotonic time the next open stage is
        due, or None. While ``busy(topic)`` says the sender still has calls in flight for a
        stage's topic, the stage keeps filling, up to MAX_DEFER_S past its linger (see below)."""
        linger = self.config.linger_ms / 1000
        with self._lock:
            next_deadline = None
            for stage in list(self._open.values()):
                due = stage.created + linger
                if due <= now and busy is not None and busy(stage.topic) and now < due + MAX_DEFER_S:
                    due += MAX_DEFER_S  # the sender wakes earlier, when a response arrives
                if self.closed or due <= now:
                    self._close(stage)
                elif next_deadline is None or due < next_deadline:
                    next_deadline = due
            return next_deadline

    # --- flush / close ------------------------------------------------------------------------

    def flush(self, timeout: float | None) -> None:
        """Close every open stage now and wait until each record appended so far has its outcome
        and its callbacks have run."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            for stage in list(self._open.values()):
                self._close(stage)
            while self._outstanding and self._outstanding[0].done:
                self._outstanding.popleft()
            waiting = list(self._outstanding)
        for result in waiting:
            if not result.done:
                try:
                    result.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                except KafkaTimeoutError:
                    raise KafkaTimeoutError(f"flush did not complete within {timeout}s") from None
        self._runner.drain(deadline)

    def close(self, reason: IllegalStateError | None = None) -> None:
        """Refuse further records (with ``reason``, when given, rather than "closed") and close the
        open stages for the sender."""
        with self._lock:
            if reason is not None and not self.closed:
                self._closed_by = reason
            self.closed = True
            for stage in list(self._open.values()):
                self._close(stage)
        self.wakeup.set()

    def _refusal(self) -> IllegalStateError:
        reason = self._closed_by
        return type(reason)(*reason.args) if reason is not None else \
            IllegalStateError("cannot send: the producer is closed")

    def outstanding(self) -> list[ProduceResult]:
        with self._lock:
            return [r for r in self._outstanding if not r.done]
