"""Fetcher: keeps one fetch in flight per assigned partition and buffers what comes back.

Each partition has a *position* (the next offset poll() returns) and a
*fetch offset* (where the next fetch starts, ahead of the position while
fetched data waits in the buffer). A fetch is a long poll at the leader
replica (fetch_min_bytes / fetch_max_wait_ms) that returns whole batches as
one numpy buffer; on the leader's node that buffer is read straight from
Ray's shared memory. Decoding happens in poll(), column by column.

Memory is bounded by fetch_max_bytes over all partitions: bytes fetched but
not yet handed out by poll(), plus the bytes asked for by fetches in
flight. A partition behind its high watermark gets a fetch of up to
max_partition_fetch_bytes while the budget allows; one caught up gets a
small long poll; when nothing is in flight one fetch always goes out, since
the replica returns at least one whole batch.

A seek bumps the partition's generation, so a response to a fetch sent
before the seek is dropped instead of delivered. Not thread-safe, like
kafka-python's consumer: one thread polls.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import ray

from raylog import ray_calls
from raylog.consumer import column_batch
from raylog.client_metrics import ConsumerMetrics
from raylog.consumer.column_batch import ColumnBatch
from raylog.config import ConsumerConfig
from raylog.consumer.local_leader import LocalLeader
from raylog.errors import NoOffsetForPartitionError, OffsetOutOfRangeError
from raylog.metadata import LeaderWatch, Metadata
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.records import TopicPartition
from raylog.storage import futex

RETRY_BACKOFF_S = 0.1
"""Longest sleep of a wait with no fetch in flight."""
LOCAL_WAIT_MAX_S = 0.1
LOCAL_WAIT_WITH_CALLS_S = 0.001
"""A consumer waiting on local leaders' pages sleeps on their futexes (woken within tens of
microseconds of a publication) in slices of 100 ms, or 1 ms while fetch calls for other
partitions are in flight (Ray's futures cannot wake a futex)."""
LOCAL_POLL_MIN_S = 0.00005
LOCAL_POLL_MAX_S = 0.002
LOCAL_POLL_GROWTH = 1.1
"""Without futexes (not Linux), it polls the pages instead: every 50 us at first, backing off by
10% per look to every 2 ms."""
COLLECT_INTERVAL_S = 0.002
"""How often a poll that has records to return anyway (read locally, or buffered) takes up the
fetches answered meanwhile: answers were taken only by a poll that waited, so a partition fetched
from another node starved while local reads always had records (issue 31's chaos run). A
non-blocking ray.wait costs tens of microseconds: at most a few percent of a busy poll loop."""
MIN_FETCH_BYTES = 64 * 1024
"""A fetch that could ask for less than this waits for the buffer to drain instead."""
RESEND_AFTER_S = 3.0
"""A fetch still unanswered this long past fetch_max_wait_ms, its leader unchanged, is sent again
(a read: the first answer, if it comes, is dropped). Measured in the chaos run: a fetch to the
leader elected after its predecessor's process was SIGKILLed stayed unanswered until the request
timeout (10 s there; the member's polls stalled that long) while that leader answered every other
caller; sent again, the partition's polls did not stall (0 stalls in 2 runs of the short schedule,
against one such stall in each of 5 runs before). The cause was most likely the one found later
(COLLECT_INTERVAL_S): the call was answered, but its answer was never taken up while the member's
local reads had records; the resend stays as a guard, a read costing only the work."""
WATCH_AFTER_S = 1.0
WATCH_POLL_S = 0.05
"""A fetch unanswered WATCH_AFTER_S past fetch_max_wait_ms has its topic's leaders looked up
again (LeaderWatch), the answer looked for every WATCH_POLL_S (the producer's sender does the
same); at once when the leader is on this node and its page shows its lease lapsed."""


@dataclass(slots=True)
class PartitionState:
    position: int | None = None
    fetch_offset: int | None = None
    generation: int = 0
    paused: bool = False
    in_flight: object = None
    in_flight_bytes: int = 0
    retry_at: float = 0.0
    high_watermark: int = -1
    served_at: float = 0.0
    sent_to_epoch: int = -1
    """The leader epoch of the leader the fetch in flight went to."""
    buffered: deque = field(default_factory=deque)
    error: BaseException | None = None
    local: LocalLeader | None = None
    """Reads the leader's segment files, when the leader is on this node (local_reads)."""
    local_idle: bool = False
    """The last local read found nothing new: wait() watches the leader's page, no call in flight."""
    watch_leader: bool = False
    """The fetch in flight went to a leader that seems gone, so its topic's leaders are watched
    from the moment it went out, not WATCH_AFTER_S past fetch_max_wait_ms: the leader is on this
    node and its page showed its lease lapsed (paused or cut off: the controller fences it soon),
    or the fetch is the resend of one unanswered for RESEND_AFTER_S (the resend used to start the
    wait over: the test of issue 31's failover saw a consumer on another node resume 1 s after the
    producers did, every time)."""


class Fetcher:
    def __init__(self, config: ConsumerConfig, metadata: Metadata, metrics: ConsumerMetrics | None = None,
                 leader_watch_after_s: float = 9.0):
        """``leader_watch_after_s``: a leader lookup unanswered this long is asked again (the
        cluster's replica_session_timeout_ms)."""
        self.config = config
        self._watch_after_s = leader_watch_after_s
        self._watch = LeaderWatch(metadata, leader_watch_after_s)
        self._watch_at: float | None = None
        """When send_fetches next looks at the fetches in flight for replaced leaders."""
        self._collect_at = 0.0
        """When send_fetches next takes up the fetches answered meanwhile."""
        self.metadata = metadata
        self.metrics = metrics or ConsumerMetrics()
        self.states: dict[TopicPartition, PartitionState] = {}
        self._refs: dict = {}
        self._timeout_s = config.request_timeout_ms / 1000
        self._rotation = 0
        self.buffered_bytes = 0
        """Bytes of fetched batches not yet handed out, plus bytes asked for in flight."""

    # --- positions -------------------------------------------------------------------------

    def list_offset(self, tp: TopicPartition, timestamp: int, timeout_s: float | None = None) -> tuple[int, int, int]:
        """The leader's (offset, timestamp, leader epoch) for ``timestamp`` (or EARLIEST/LATEST), retried on
        leader moves within ``timeout_s`` (default request_timeout_ms)."""
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        return ray_calls.with_retries(
            lambda: ray_calls.get(self.metadata.leader(tp.topic, tp.partition).list_offsets.remote(timestamp),
                                  timeout_s),
            timeout_s, on_retry=lambda: self.metadata.invalidate(tp.topic))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        st = self.states[tp]
        st.position = st.fetch_offset = offset
        st.generation += 1
        self._discard(st)
        st.error = None

    def _discard(self, st: PartitionState) -> None:
        """Forget a partition's buffered chunks and its fetch in flight."""
        st.local_idle = False
        self.buffered_bytes -= sum(chunk.nbytes for chunk in st.buffered)
        st.buffered.clear()
        self._drop_call(st)

    def _drop_call(self, st: PartitionState) -> None:
        """Forget a partition's fetch in flight (its answer, if one comes, is ignored); what was
        buffered stays, and the next fetch asks again from where it asked."""
        if st.in_flight is not None:
            if self._refs.pop(st.in_flight, None) is not None:
                ray_calls.forget(st.in_flight)
            self.buffered_bytes -= st.in_flight_bytes
            st.in_flight = None
            st.in_flight_bytes = 0
        st.watch_leader = False

    def reset(self, tp: TopicPartition, strategy: str, timeout_s: float | None = None) -> None:
        if strategy == "none":
            raise NoOffsetForPartitionError(f"{tp.topic}-{tp.partition} has no position and auto_offset_reset is 'none'")
        ts = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        self.seek(tp, self.list_offset(tp, ts, timeout_s)[0])

    def resolve_positions(self) -> None:
        """Reset every partition without a position, asking all their leaders at once."""
        unresolved = [tp for tp, st in self.states.items() if st.position is None]
        if not unresolved:
            return
        strategy = self.config.auto_offset_reset
        if strategy == "none" or len(unresolved) == 1:
            for tp in unresolved:
                self.reset(tp, strategy)
            return
        ts = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        found = ray_calls.with_retries(
            lambda: ray_calls.get([self.metadata.leader(tp.topic, tp.partition).list_offsets.remote(ts)
                                   for tp in unresolved], self._timeout_s),
            self._timeout_s, on_retry=self.metadata.invalidate)
        for tp, (offset, *_) in zip(unresolved, found):
            self.seek(tp, offset)

    # --- fetching ----------------------------------------------------------------------------

    def send_fetches(self) -> None:
        now = time.monotonic()
        # Here, not only in wait(): a consumer with data from other partitions never waits.
        if self._refs and now >= self._collect_at:
            self._collect_answered()
            self._collect_at = now + COLLECT_INTERVAL_S
        self._watch_at = self._watch_leaders(now)
        wanting = [(tp, st) for tp, st in self.states.items()
                   if not (st.paused or st.in_flight is not None or st.position is None or st.error is not None
                           or st.retry_at > now)]
        if self.config.local_reads:
            wanting = [(tp, st) for tp, st in wanting if not self._read_locally(tp, st)]
        if not wanting:
            return
        # A partition not known to be behind (the last response showed it caught up, or it was not
        # fetched yet) gets a long poll with a small budget: parked at its replica it holds little
        # of fetch_max_bytes, and it answers as soon as there is data, with the high watermark.
        # Partitions known to be behind get full-size fetches, the least recently served first,
        # while fetch_max_bytes allows. Measured at 64 partitions (bench/partitions_bench.py):
        # 50 MiB shared evenly made 0.8 MiB calls, and full-size fetches parked on empty
        # partitions held the budget for fetch_max_wait_ms while data waited elsewhere.
        caught_up = [(tp, st) for tp, st in wanting if st.high_watermark <= st.fetch_offset]
        behind = [(tp, st) for tp, st in wanting if st.high_watermark > st.fetch_offset]
        behind.sort(key=lambda item: item[1].served_at)
        free = self.config.fetch_max_bytes - self.buffered_bytes
        poll_bytes = min(MIN_FETCH_BYTES, self.config.max_partition_fetch_bytes)
        for tp, st in caught_up:
            if free < poll_bytes and self._refs:
                break
            self._send(tp, st, poll_bytes)
            free -= poll_bytes
        full = min(self.config.max_partition_fetch_bytes, self.config.fetch_max_bytes)
        for tp, st in behind:
            # Full-size or not at all (unless nothing is in flight): a fetch returns at least one
            # whole batch whatever it asks for, so small asks only multiply calls.
            if free < full and self._refs:
                break
            budget = max(min(full, free), 1)
            self._send(tp, st, budget)
            free -= budget

    def _watch_leaders(self, now: float) -> float | None:
        """Fetches unanswered WATCH_AFTER_S past fetch_max_wait_ms, or whose leader seems gone
        (watch_leader): look up their leaders again (every WATCH_INTERVAL_S per topic, without
        blocking poll on the controller) and fetch from the new one where the leader was replaced
        meanwhile, so a consumer does not wait on a paused leader after it was fenced; a fetch
        unanswered past fetch_max_wait_ms + request_timeout_ms is given up in any case. Returns
        when to look next (None: nothing in flight)."""
        wait_s = self.config.fetch_max_wait_ms / 1000
        flying = [(tp, st) for tp, st in self.states.items() if st.in_flight is not None]
        late = [(tp, st) for tp, st in flying if st.watch_leader or now - st.served_at > wait_s + WATCH_AFTER_S]
        for tp, st in late:
            if now - st.served_at > wait_s + self._timeout_s:
                self._drop_call(st)
                self.metadata.invalidate(tp.topic)
            elif now - st.served_at > wait_s + RESEND_AFTER_S:
                self._drop_call(st)
                st.watch_leader = True
        answered = self._watch.look({tp.topic for tp, st in late if st.in_flight is not None}, now)
        for tp, st in late:
            info = answered.get(tp.topic)
            if info is not None and st.in_flight is not None \
                    and info.description.partitions[tp.partition].leader_epoch > st.sent_to_epoch:
                self._drop_call(st)
        if late:
            return now + WATCH_POLL_S
        return min((st.served_at + wait_s + WATCH_AFTER_S for _, st in flying), default=None)

    # --- reading on the leader's node -------------------------------------------------------

    def _read_locally(self, tp: TopicPartition, st: PartitionState) -> bool:
        """Read what the leader's fetch would return, from its files; False when the partition
        must be fetched through the leader instead (another node, a page that says so)."""
        if st.local is None:
            st.local = LocalLeader(self.metadata, tp.topic, tp.partition)
        reader = st.local.current()
        if reader is None:
            return False
        if self.buffered_bytes >= self.config.fetch_max_bytes:
            return True  # the buffer is full: read when poll() has drained it
        started = time.monotonic()
        got = st.local.read(st.fetch_offset, self.config.max_partition_fetch_bytes)
        if got is None:
            st.local_idle = False
            if st.local.lapsed:
                st.watch_leader = True
            return False
        records, st.high_watermark = got
        if not records:
            st.local_idle = True
            return True
        st.local_idle = False
        self.metrics.local_bytes.record(len(records))
        self.metrics.fetches.record((time.monotonic() - started) * 1000)
        self.metrics.fetch_bytes.record(len(records))
        # The reader checked every batch's CRC already.
        self._buffer(tp, st, records, st.fetch_offset, check_crcs=False)
        return True

    def _close_reader(self, st: PartitionState) -> None:
        if st.local is not None:
            st.local.close()
        st.local_idle = False

    def _local_news(self) -> list[tuple[int, int]] | None:
        """None when a partition read locally has something new to read (or its page changed
        enough that it must be looked at again); else the futex words to sleep on until one does."""
        words = []
        for st in self.states.values():
            if st.local is not None and st.local.reader is not None and st.local_idle and not st.paused:
                view = st.local.reader.view
                snap = view.snapshot()
                if snap is None or snap.high_watermark > st.fetch_offset or snap.leader_epoch != st.local.epoch \
                        or snap.log_start_offset > st.fetch_offset:
                    return None
                words.append(view.wait_word(snap))
        return words

    def _send(self, tp: TopicPartition, st: PartitionState, budget: int) -> None:
        try:
            leader = self.metadata.leader(tp.topic, tp.partition)
        except Exception as exc:  # noqa: BLE001 - retried (no leader yet), or surfaced on the next poll
            self._failed(tp, st, ray_calls.translate(exc))
            return
        ref = leader.fetch.remote(st.fetch_offset, budget, self.config.fetch_max_wait_ms, self.config.fetch_min_bytes)
        st.sent_to_epoch = self.metadata.leader_epoch(tp.topic, tp.partition)
        st.in_flight = ref
        st.in_flight_bytes = budget
        st.served_at = time.monotonic()
        self.buffered_bytes += budget
        self._refs[ref] = (tp, st.generation, st.fetch_offset)
        if st.watch_leader:
            self._watch_at = st.served_at

    def wait(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for at least one fetch to complete, then take every completed one
        (or, with partitions read locally, until one of their leaders' pages shows new data)."""
        if self._watch_at is not None:
            timeout_s = min(timeout_s, max(0.0, self._watch_at - time.monotonic()))
        if any(st.local_idle for st in self.states.values()):
            self._wait_local(timeout_s)
            return
        if not self._refs:
            if timeout_s > 0:
                time.sleep(min(timeout_s, RETRY_BACKOFF_S))
            return
        refs = list(self._refs)
        ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, timeout_s))
        if ready and len(refs) > 1:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            self._complete(ref)

    def _collect_answered(self) -> bool:
        """Take every fetch answered by now, without waiting; False when none was."""
        refs = list(self._refs)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            self._complete(ref)
        return bool(ready)

    def _wait_local(self, timeout_s: float) -> None:
        """Sleep on the local leaders' pages (a futex each replica wakes when it publishes) and
        watch the calls in flight, until one has news."""
        deadline = time.monotonic() + timeout_s
        pause = LOCAL_POLL_MIN_S
        while True:
            words = self._local_news()
            if words is None:
                return
            if self._refs and self._collect_answered():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if futex.available and words:
                # Calls in flight are looked at between sleeps; a replica that stopped publishing
                # (killed, paused) is noticed by the next read once the poll's time is up.
                futex.wait_any(words, min(left, LOCAL_WAIT_WITH_CALLS_S if self._refs else LOCAL_WAIT_MAX_S))
            else:
                time.sleep(min(pause, left))
                pause = min(pause * LOCAL_POLL_GROWTH, LOCAL_POLL_MAX_S)

    def _complete(self, ref) -> None:
        tp, generation, offset = self._refs.pop(ref)
        st = self.states.get(tp)
        if st is None or st.generation != generation:
            return
        st.in_flight = None
        st.watch_leader = False
        self.buffered_bytes -= st.in_flight_bytes
        st.in_flight_bytes = 0
        try:
            response = ray_calls.get(ref)
        except OffsetOutOfRangeError as exc:
            if self.config.auto_offset_reset == "none":
                st.error = exc
            else:
                self.reset(tp, self.config.auto_offset_reset)
            return
        except Exception as exc:  # noqa: BLE001
            self._failed(tp, st, ray_calls.translate(exc))
            return
        records, st.high_watermark = response[0], response[1]
        self.metrics.fetches.record((time.monotonic() - st.served_at) * 1000)
        self.metrics.fetch_bytes.record(len(records))
        if len(records) == 0:
            return
        self.metrics.remote_bytes.record(len(records))
        self._buffer(tp, st, records, offset, self.config.check_crcs)

    def _buffer(self, tp: TopicPartition, st: PartitionState, records, offset: int, check_crcs: bool) -> None:
        chunks, next_offset = column_batch.decode(tp.topic, tp.partition, records, offset, check_crcs)
        st.fetch_offset = next_offset
        if chunks:
            st.buffered.extend(chunks)
            self.buffered_bytes += sum(chunk.nbytes for chunk in chunks)
        elif st.position == offset and not st.buffered:
            st.position = next_offset

    def _failed(self, tp: TopicPartition, st: PartitionState, err: BaseException) -> None:
        """A retriable error (leader moving or restarting) backs off and refetches; any other is
        raised by the next poll."""
        if getattr(err, "retriable", False):
            self.metadata.invalidate(tp.topic)
            st.retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
        else:
            st.error = err

    # --- handing records out -----------------------------------------------------------------

    def take(self, max_records: int, advance: bool = True) -> list[ColumnBatch]:
        """Buffered chunks, at most ``max_records`` records; advances positions past them unless
        ``advance`` is False (the consumer's iterator moves them record by record). Raises a
        partition's stored error (e.g. OffsetOutOfRange with auto_offset_reset='none')."""
        out: list[ColumnBatch] = []
        left = max_records
        order = list(self.states.items())
        if order:
            # Start one partition later each time, so a busy partition cannot starve the rest.
            self._rotation = (self._rotation + 1) % len(order)
            order = order[self._rotation:] + order[:self._rotation]
        for tp, st in order:
            if st.error is not None:
                err, st.error = st.error, None
                raise err
            while st.buffered and left > 0 and not st.paused:
                chunk = st.buffered[0]
                if len(chunk) <= left:
                    st.buffered.popleft()
                    self.buffered_bytes -= chunk.nbytes
                else:
                    rest = chunk.slice(left, len(chunk))
                    head = chunk.slice(0, left)
                    rest.nbytes = chunk.nbytes - head.nbytes  # what stays buffered keeps counting
                    st.buffered[0] = rest
                    self.buffered_bytes -= head.nbytes
                    chunk = head
                out.append(chunk)
                left -= len(chunk)
                if advance:
                    st.position = chunk.next_offset
        return out

    def drop(self, tp: TopicPartition) -> None:
        st = self.states.pop(tp, None)
        if st is not None:
            self._discard(st)
            self._close_reader(st)

    def close(self) -> None:
        for st in self.states.values():
            self._close_reader(st)
        self._refs.clear()
        self.states.clear()
        self.buffered_bytes = 0
