"""Sender: the producer's background thread, one Ray call per partition batch.

It takes closed stages from the accumulator, has the batch builder cut them
into encoded partition batches, calls each partition leader's ``produce``
with up to max_in_flight_requests_per_connection calls in flight per
partition, and completes each batch's records from the response. It sleeps
on one event that everything which gives it work sets: a closed stage, a
flush, close, and Ray's completion callback of an in-flight call; timers
(linger, retry backoff, request and delivery timeouts) bound the sleep.

Idempotence, per partition, after Kafka's producer with KIP-360:

- A batch gets its epoch and sequence when it is first sent, so a batch
  that fails before leaving the producer never opens a gap.
- A retriable error resends the same bytes (same sequence: the replica
  answers a duplicate with the first append's offsets) after a jittered
  backoff. A retry goes out even when the in-flight limit is reached: the
  calls in flight after it wait at the replica for its sequence, so holding
  it back behind them would stall the partition. New batches wait while a
  retry is pending, so order holds.
- At most max_in_flight_requests_per_connection (5) batches per partition are
  *unresolved* (sent, not yet acknowledged or failed for good), whether or not
  their call is still in flight: a call that timed out here may have been
  appended there, and the replica remembers only the last 5 batches per
  producer. Were more sent meanwhile, the retry would fall out of that window
  and be appended twice; the replica answers such a sequence with
  DuplicateSequenceError, and its records fail without being sent again.
- A batch the replica rejects for good (too large, a null key on a
  compacted topic, corrupt) fails its own records only: the replica marks
  its sequence as used, so the next batches follow without a gap.
- A batch whose outcome stays unknown when it fails (its retries or
  delivery timeout ran out after it was sent) may or may not be in the log,
  so the partition's sequence can no longer be trusted: once the partition's
  in-flight calls settle, the producer bumps that partition's epoch and
  starts again at sequence 0; unacknowledged batches are re-sequenced in
  order. The replica takes a higher epoch as a fresh start and fences the
  old one (InvalidProducerEpochError), and batches it fenced or never
  appended (OutOfOrderSequenceError) are re-sequenced and sent again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from concurrent.futures import Future

import numpy as np
import ray

from raylog import produce_channel, ray_calls
from raylog.producer.accumulator import RecordAccumulator
from raylog.producer.batch_builder import BatchBuilder, ProducerBatch
from raylog.client_metrics import ProducerMetrics
from raylog.config import ProducerConfig
from raylog.errors import (
    IllegalStateError, InvalidProducerEpochError, KafkaTimeoutError, NotLeaderForPartitionError,
    OutOfOrderSequenceError,
)
from raylog.metadata import LeaderWatch, Metadata
from raylog.storage.batch import RecordBatch

log = logging.getLogger(__name__)

MAX_PRODUCER_EPOCH = 32767
"""producer_epoch is an int16 in the batch header."""
SEQUENCE_MASK = 0x7FFFFFFF
"""Sequences wrap to 0 after 2**31 - 1, as Kafka's do."""
CHANNEL_RECHECK_S = 5.0
"""A partition whose leader had no same-node channel is looked at again this often (its leader
may have moved here without a new epoch showing in this producer's metadata yet)."""
CHANNEL_LOOKUP_WAIT_S = 5.0
"""A partition's batches wait this long at most for its leader's location (its channel) before
they go by Ray call; other partitions do not wait for it."""
_LOOKING = object()
MAX_CHANNELS = 32
"""Channels one producer keeps open (each is a socket and a reader thread): partitions beyond
them on this node use Ray calls."""
WATCH_AFTER_S = 1.0
WATCH_POLL_S = 0.05
"""A call unanswered WATCH_AFTER_S has its topic's leaders looked up again (LeaderWatch), the
answer looked for every WATCH_POLL_S: an answer takes milliseconds (a few hundred under load)."""
SESSION_CHECK_S = 1.0
"""An idle sender wakes this often to see whether Ray was shut down (Ray tells no one), so a producer
left open ends its thread within about this long instead of living on into a later session."""
JITTER = 0.2
"""Retry backoff is spread by +-20% (KIP-580), so producers that failed together retry apart."""


SMALL_BATCH_BYTES = 64 * 1024
"""Batches up to this size go to the replica as bytes, larger ones as a numpy view: Ray
serializes a numpy array without a copy (it pays for large batches) but with ~60 us more
per call than bytes (measured on a 100-byte batch: 222 vs 160 us to submit)."""


def _call_argument(records):
    return bytes(records) if len(records) <= SMALL_BATCH_BYTES else np.frombuffer(records, dtype=np.uint8)


class PartitionState:
    """The sender's view of one partition: its queue, calls in flight and sequence."""

    __slots__ = ("queue", "in_flight", "unresolved", "epoch", "next_sequence", "bump_pending")

    def __init__(self) -> None:
        self.queue: deque[ProducerBatch] = deque()
        self.in_flight = 0
        self.unresolved = 0
        """Batches sent at least once and not yet acknowledged or failed for good."""
        self.epoch = 0
        self.next_sequence = 0
        self.bump_pending = False


def admits(st: PartitionState, batch: ProducerBatch, cap: int) -> bool:
    """Whether the partition's next queued batch may be sent now.

    A retry goes out even at the in-flight cap: the calls in flight after it
    wait at the replica for its sequence, so holding it behind them would stall
    the partition until they time out. A new batch waits for room in flight and
    among the unresolved batches (see the module doc), for a pending retry ahead
    of it (it is queued first), and for an epoch bump. Nothing goes out while an
    epoch bump waits for the calls in flight to settle.
    """
    if st.bump_pending:
        return False
    return batch.attempts > 0 or (st.in_flight < cap and st.unresolved < cap)


def retry_backoff_s(attempts: int, config: ProducerConfig, rng: random.Random = random._inst) -> float:
    """Exponential backoff from retry_backoff_ms, capped at retry_backoff_max_ms, with +-20% jitter."""
    backoff_ms = min(config.retry_backoff_ms * 2 ** max(0, attempts - 1), config.retry_backoff_max_ms)
    return backoff_ms * rng.uniform(1 - JITTER, 1 + JITTER) / 1000


class Sender(threading.Thread):
    def __init__(self, config: ProducerConfig, accumulator: RecordAccumulator, metadata: Metadata,
                 producer_id: int, leader_watch_after_s: float = 9.0):
        """``leader_watch_after_s``: a call unanswered this long has its partition's leader looked up
        again (the cluster's replica_session_timeout_ms: by then a paused leader is fenced)."""
        super().__init__(name="raylog-producer-sender", daemon=True)
        self.config = config
        self.acc = accumulator
        self.metadata = metadata
        self.acks = config.required_acks
        self.idempotent = config.enable_idempotence
        self.builder = BatchBuilder(config, producer_id)
        # The replica gives up waiting for the ISR a little before this producer gives up on the call,
        # so an acks='all' timeout comes back as the replica's error rather than a lost response.
        self._replica_wait_ms = max(1, config.request_timeout_ms - min(1000, config.request_timeout_ms // 10))
        self.partitions: dict = {}
        self.in_flight: dict = {}
        """ObjectRef -> (batch, attempt): calls awaiting their response."""
        self._responses: deque = deque()
        self._in_flight_by_topic: dict[str, int] = {}
        self._halt = False
        self._abort_error: BaseException | None = None
        self.metrics = ProducerMetrics()
        self._channels: dict = {}
        """TopicPartition -> (leader epoch, ProduceChannel or None, monotonic time looked up): the
        same-node channel to each partition's leader (produce_channel.py)."""
        self._lookups: dict = {}
        """TopicPartition -> (leader epoch, ObjectRef of the leader's read_location, monotonic time
        asked): lookups of a channel not answered yet."""
        self._watch_after_s = leader_watch_after_s
        self._watch = LeaderWatch(metadata, leader_watch_after_s)
        self._session = metadata.session

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._loop()
        finally:
            for _, channel, _ in self._channels.values():
                if channel is not None:
                    channel.close()
            self._channels.clear()
            self._lookups.clear()

    def _loop(self) -> None:
        wakeup = self.acc.wakeup
        while True:
            wakeup.clear()
            if not self._session.alive():
                self._end_with_session()
                return
            now = time.monotonic()
            for stage in self.acc.take_closed():
                self._cut(stage)
            while self._responses:
                self._on_response(*self._responses.popleft())
            if self._halt:
                self._abort()
                return
            deadlines = [self._expire(now)]
            if not self._backlogged():
                # While batches wait for room in flight, open stages keep growing instead of closing
                # into small batches that would only queue behind them.
                deadlines.append(self.acc.close_lingering(now, self._topic_busy))
                for stage in self.acc.take_closed():
                    self._cut(stage)
            deadlines.append(self._send_ready(now))
            self.acc.offered()
            if self.acc.closed and not self.in_flight and not self._has_queued() and not self._responses:
                for stage in self.acc.take_closed():
                    self._cut(stage)
                if not self._has_queued():
                    return
            due = min((d for d in deadlines if d is not None), default=None)
            wakeup.wait(SESSION_CHECK_S if due is None else min(SESSION_CHECK_S, max(0.0, due - time.monotonic())))

    def stop(self, error: BaseException) -> None:
        """Fail whatever is still queued or in flight with ``error`` and end the thread."""
        self._abort_error = error
        self._halt = True
        self.acc.wakeup.set()

    def _end_with_session(self) -> None:
        """Ray was shut down under an open producer: refuse new records and fail the rest with the
        reason, responses unread (their outcome is unknown), without another Ray call (one would
        start a new local Ray)."""
        error = self._session.ended()
        self.acc.close(error)
        self._abort_error = error
        self._responses.clear()
        self._abort()

    def _abort(self) -> None:
        error = self._abort_error or IllegalStateError("producer closed before the record was sent")
        for batch, _ in list(self.in_flight.values()):
            self._fail(batch, error)
        self.in_flight.clear()
        self._in_flight_by_topic.clear()
        for st in self.partitions.values():
            while st.queue:
                self._fail(st.queue.popleft(), error)
        for stage in self.acc.take_closed():
            stage.result.fail_all(len(stage.values), error)
            self.acc.release(stage.nbytes)

    # --- cutting and sending ------------------------------------------------------------------

    def _state(self, tp) -> PartitionState:
        st = self.partitions.get(tp)
        if st is None:
            st = self.partitions[tp] = PartitionState()
        return st

    def _cut(self, stage) -> None:
        try:
            batches = self.builder.cut(stage)
        except Exception as exc:  # noqa: BLE001 - a bad stage fails its own records, not the sender
            log.exception("raylog producer could not build batches for topic %r", stage.topic)
            stage.result.fail_all(len(stage.values), ray_calls.translate(exc))
            self.acc.release(stage.nbytes)
            return
        for batch in batches:
            if batch.error is not None:
                self._fail(batch, batch.error)
            else:
                self._state(batch.tp).queue.append(batch)

    def _topic_busy(self, topic: str) -> bool:
        return self._in_flight_by_topic.get(topic, 0) > 0

    def _backlogged(self) -> bool:
        return any(st.queue and st.in_flight >= self.config.max_in_flight_requests_per_connection
                   for st in self.partitions.values())

    def _has_queued(self) -> bool:
        return any(st.queue for st in self.partitions.values())

    def _send_ready(self, now: float) -> float | None:
        """Send what each partition admits; returns the earliest retry time still waiting."""
        cap = self.config.max_in_flight_requests_per_connection
        next_retry = None
        for tp, st in self.partitions.items():
            if st.bump_pending and st.in_flight == 0:
                self._bump_epoch(st)
            while st.queue:
                batch = st.queue[0]
                if batch.retry_at > now:
                    next_retry = batch.retry_at if next_retry is None else min(next_retry, batch.retry_at)
                    break
                if not admits(st, batch, cap):
                    break
                try:
                    route = self._route(tp, now)
                except Exception as exc:  # noqa: BLE001 - metadata errors complete the batch like call errors
                    route = exc
                if not isinstance(route, BaseException) and route[2] is _LOOKING:
                    # The first batches to a leader on this node wait for its channel, as every later
                    # one takes it: sent by Ray call meanwhile they could be overtaken (with idempotence
                    # off, appended out of order). The lookup's answer wakes the loop.
                    until = self._lookups[tp][2] + CHANNEL_LOOKUP_WAIT_S
                    next_retry = until if next_retry is None else min(next_retry, until)
                    break
                st.queue.popleft()
                self._submit(st, batch, now, route)
        return next_retry

    def _bump_epoch(self, st: PartitionState) -> None:
        st.epoch = st.epoch + 1 if st.epoch < MAX_PRODUCER_EPOCH else 0
        st.next_sequence = 0
        st.bump_pending = False
        for batch in st.queue:
            batch.base_sequence = -1

    def _route(self, tp, now: float) -> tuple:
        """(leader, leader epoch, same-node channel or None or _LOOKING) for a batch to ``tp`` now;
        raises what the metadata raises."""
        info = self.metadata.topic(tp.topic, self.config.metadata_max_age_ms / 1000)
        leader = self.metadata.leader(tp.topic, tp.partition)
        epoch = info.description.partitions[tp.partition].leader_epoch
        return leader, epoch, self._channel(tp, leader, epoch, now) if self.config.local_produce else None

    def _submit(self, st: PartitionState, batch: ProducerBatch, now: float, route) -> None:
        """Send ``batch`` the way ``route`` (``_route``'s answer, or the error it raised) says."""
        batch.attempts += 1
        if batch.attempts == 1:
            st.unresolved += 1
        if self.idempotent and batch.base_sequence < 0:
            batch.epoch = st.epoch
            batch.base_sequence = st.next_sequence
            st.next_sequence = (st.next_sequence + batch.count) & SEQUENCE_MASK
            RecordBatch(batch.records).set_producer_state(batch.epoch, batch.base_sequence)
        try:
            if isinstance(route, BaseException):
                raise route
            leader, epoch, channel = route
            batch.sent_to_epoch = epoch
            if channel is not None:
                ref = channel.produce(batch.records, self.acks, epoch, self._replica_wait_ms)
                self.metrics.local_requests.record(1, now)
            else:
                ref = leader.produce.remote(_call_argument(batch.records), self.acks, epoch, self._replica_wait_ms)
        except Exception as exc:  # noqa: BLE001 - metadata errors complete the batch like call errors
            self._on_error(st, batch, ray_calls.translate(exc), now)
            return
        batch.sent_at = now
        self.metrics.bytes.record(len(batch.records), now)
        if batch.ever_sent:
            self.metrics.retries.record(batch.count, now)
        batch.ever_sent = True
        st.in_flight += 1
        self._in_flight_by_topic[batch.tp.topic] = self._in_flight_by_topic.get(batch.tp.topic, 0) + 1
        attempt = batch.attempts
        self.in_flight[ref] = (batch, attempt)
        if self.acks == 0:
            self.metrics.records.record(batch.count, now)
            batch.result.complete_batch(batch.indices, -1)
        (ref if isinstance(ref, Future) else ref.future()).add_done_callback(lambda _f, ref=ref: self._responded(ref))

    def _channel(self, tp, leader, epoch: int, now: float):
        """The same-node channel to ``leader``; None: use a Ray call; _LOOKING: its location was
        asked for less than CHANNEL_LOOKUP_WAIT_S ago and is not answered yet. Looked up once per
        leader epoch, again after it breaks, and every CHANNEL_RECHECK_S while there is none. The
        sender thread never waits for the answer (the leader's ``read_location``): a paused leader
        holds up its own partition only, and only that long."""
        entry = self._channels.get(tp)
        if entry is not None and entry[0] == epoch and entry[1] is not None and entry[1].broken is None:
            return entry[1]
        lookup = self._lookups.get(tp)
        if lookup is not None and lookup[0] == epoch:
            _, ref, asked_at = lookup
            if not ray.wait([ref], timeout=0)[0]:
                return _LOOKING if now - asked_at < CHANNEL_LOOKUP_WAIT_S else None
            del self._lookups[tp]
            channel = self._open_channel(ref)
            self._replace_channel(tp, (epoch, channel, now))
            return channel
        if entry is not None and entry[0] == epoch and entry[1] is None and now - entry[2] < CHANNEL_RECHECK_S:
            return None
        self._replace_channel(tp, (epoch, None, now))
        self._lookups.pop(tp, None)
        open_channels = sum(1 for _, c, _ in self._channels.values() if c is not None and c.broken is None)
        if not (produce_channel.available and open_channels < MAX_CHANNELS):
            return None
        ref = leader.read_location.remote()
        ref.future().add_done_callback(lambda _f: self.acc.wakeup.set())
        self._lookups[tp] = (epoch, ref, now)
        return _LOOKING

    @staticmethod
    def _open_channel(lookup) -> "produce_channel.ProduceChannel | None":
        """The channel a leader's answered ``read_location`` names, when it runs on this node."""
        try:
            node, _, name, secret = ray_calls.get(lookup, 0)
            if name and node == ray.get_runtime_context().get_node_id():
                return produce_channel.ProduceChannel(name, bytes.fromhex(secret))
        except Exception:  # noqa: BLE001 - no channel (a replica gone, another node): Ray calls
            pass
        return None

    def _replace_channel(self, tp, entry: tuple) -> None:
        old = self._channels.get(tp)
        if old is not None and old[1] is not None and old[1] is not entry[1]:
            old[1].close()
        self._channels[tp] = entry

    def _responded(self, ref) -> None:
        """Ray's completion callback (another thread): queue the response and wake the loop."""
        self._responses.append((ref,))
        self.acc.wakeup.set()

    # --- responses ----------------------------------------------------------------------------

    def _on_response(self, ref) -> None:
        entry = self.in_flight.pop(ref, None)
        if entry is None:
            return  # timed out earlier and already retried or failed
        batch, _ = entry
        st = self._state(batch.tp)
        st.in_flight -= 1
        self._in_flight_by_topic[batch.tp.topic] -= 1
        try:
            response = ref.result(0) if isinstance(ref, Future) else ray_calls.get(ref, 0)
        except Exception as exc:  # noqa: BLE001
            if self.acks != 0:
                self._on_error(st, batch, ray_calls.translate(exc), time.monotonic())
            else:
                st.unresolved -= 1
                self.acc.release(batch.nbytes)
            return
        st.unresolved -= 1
        now = time.monotonic()
        metrics = self.metrics
        metrics.requests.record((now - batch.sent_at) * 1000, now)
        metrics.batch_records.record(batch.count, now)
        metrics.batch_bytes.record(len(batch.records), now)
        if self.acks != 0:
            metrics.records.record(batch.count, now)
            base_offset, _, log_append_time_ms = response[:3]
            batch.result.complete_batch(batch.indices, base_offset, log_append_time_ms)
        self.acc.release(batch.nbytes)

    def _expire(self, now: float) -> float | None:
        """Time out calls past request_timeout_ms and queued batches past delivery_timeout_ms, and
        resend calls whose leader was replaced while they waited; returns the next time one of them
        would be due."""
        request_s = self.config.request_timeout_ms / 1000
        delivery_s = self.config.delivery_timeout_ms / 1000
        next_due = self._watch_leaders(now)
        for ref, (batch, _) in list(self.in_flight.items()):
            due = batch.sent_at + request_s
            if due <= now:
                self._abandon(ref, batch, KafkaTimeoutError(
                    f"produce to {batch.tp.topic}-{batch.tp.partition} got no response in {request_s}s"), now)
            elif next_due is None or due < next_due:
                next_due = due
        for st in self.partitions.values():
            kept = deque()
            for batch in st.queue:
                if batch.created + delivery_s <= now:
                    last = f"; the last attempt failed with {type(batch.last_error).__name__}: {batch.last_error}" \
                        if batch.last_error is not None else ""
                    self._give_up(st, batch, KafkaTimeoutError(
                        f"records to {batch.tp.topic}-{batch.tp.partition} were not acknowledged within "
                        f"delivery_timeout_ms ({self.config.delivery_timeout_ms} ms){last}"))
                else:
                    kept.append(batch)
                    due = batch.created + delivery_s
                    next_due = due if next_due is None else min(next_due, due)
            st.queue = kept
        return next_due

    def _abandon(self, ref, batch: ProducerBatch, error: BaseException, now: float) -> None:
        """Stop waiting for a call (its answer, if one comes, is ignored) and handle ``error`` as its
        outcome. A same-node channel's requests are abandoned with the channel: its connection may
        be stuck on a paused replica, and a closed one keeps nothing waiting."""
        del self.in_flight[ref]
        st = self._state(batch.tp)
        st.in_flight -= 1
        self._in_flight_by_topic[batch.tp.topic] -= 1
        if isinstance(ref, Future):
            self._close_channel(batch.tp)
        self._on_error(st, batch, error, now)

    def _close_channel(self, tp) -> None:
        entry = self._channels.pop(tp, None)
        if entry is not None and entry[1] is not None:
            entry[1].close()

    def _watch_leaders(self, now: float) -> float | None:
        """Calls unanswered for WATCH_AFTER_S: look up their partitions' leaders again (every
        WATCH_INTERVAL_S per topic, without blocking the loop on the controller) and resend, by
        sequence, those whose leader was replaced meanwhile. A paused or partitioned leader is fenced after the session
        timeout, and its lease lapsed before that, so it can acknowledge nothing: waiting out
        request_timeout_ms for its answer (Kafka's clients do) only delays the new leader. Returns
        when to look next."""
        late: dict[str, list] = {}
        next_due = None
        for ref, (batch, _) in self.in_flight.items():
            due = batch.sent_at + WATCH_AFTER_S
            if due <= now:
                late.setdefault(batch.tp.topic, []).append((ref, batch))
            else:
                next_due = due if next_due is None else min(next_due, due)
        answered = self._watch.look(set(late), now)
        if late:
            next_due = now + WATCH_POLL_S if next_due is None else min(next_due, now + WATCH_POLL_S)
        for topic, info in answered.items():
            for ref, batch in late[topic]:
                epoch = info.description.partitions[batch.tp.partition].leader_epoch
                if epoch > batch.sent_to_epoch and ref in self.in_flight:
                    self._abandon(ref, batch, NotLeaderForPartitionError(
                        f"{topic}-{batch.tp.partition}: the leader of epoch {batch.sent_to_epoch} was replaced "
                        f"(epoch {epoch}) while the call waited"), now)
        return next_due

    def _on_error(self, st: PartitionState, batch: ProducerBatch, error: BaseException, now: float) -> None:
        batch.last_error = error
        age_s = now - batch.created
        in_time = age_s * 1000 < self.config.delivery_timeout_ms
        if self.idempotent and isinstance(error, (OutOfOrderSequenceError, InvalidProducerEpochError)):
            # The replica did not append this batch: it waited for a sequence that never came, or a
            # newer epoch fenced it. Re-sequence it (after an epoch bump if nothing explains the gap).
            if in_time:
                if batch.epoch == st.epoch and not st.bump_pending:
                    st.bump_pending = True
                batch.base_sequence = -1
                self._requeue(st, batch, 0.0)
            else:
                self._give_up(st, batch, error)
            return
        if getattr(error, "retriable", False) and batch.attempts <= self.config.retries and in_time:
            self.metadata.invalidate(batch.tp.topic)
            self._requeue(st, batch, retry_backoff_s(batch.attempts, self.config))
            return
        self._give_up(st, batch, error)

    def _give_up(self, st: PartitionState, batch: ProducerBatch, error: BaseException) -> None:
        """Fail the batch's records. If it was ever sent and the replica did not reject it for
        good, it may be in the log: the partition's sequence is unknown, so bump the epoch."""
        if self.idempotent and batch.ever_sent and getattr(error, "retriable", False):
            st.bump_pending = True
        if batch.attempts > 0:
            st.unresolved -= 1
        self._fail(batch, error)

    def _requeue(self, st: PartitionState, batch: ProducerBatch, delay_s: float) -> None:
        batch.retry_at = time.monotonic() + delay_s
        st.queue.append(batch)
        if len(st.queue) > 1 and st.queue[-2].order > batch.order:
            st.queue = deque(sorted(st.queue, key=lambda b: b.order))

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self.metrics.errors.record(batch.count)
        batch.result.fail_batch(batch.indices, error)
        self.acc.release(batch.nbytes)
