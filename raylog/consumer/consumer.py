"""Consumer: kafka-python's KafkaConsumer API, with KIP-848 consumer groups.

Consumers are cheap: each tracks its own positions and fetches straight from
partition leaders. Two ways to get partitions, never both (kafka-python's
IllegalStateError otherwise): ``assign()`` takes exact partitions (offsets may
still be committed under a group_id, while that group has no members), and
``subscribe()`` joins the consumer group ``group_id``, whose coordinator
assigns partitions (raylog/consumer/group_member.py). ``Consumer(*topics)`` subscribes
when a group_id is set and otherwise assigns every partition of the topics.
Not thread-safe: one thread polls, as in kafka-python; listener callbacks run
inside poll().
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
from collections import deque
from typing import Callable, Iterable, Mapping

from raylog import memory
from raylog.consumer.column_batch import ColumnBatch
from raylog.client_metrics import ConsumerMetrics
from raylog.config import ConsumerConfig, client_config
from raylog.errors import (
    IllegalStateError, InvalidConfigError, InvalidOffsetError, InvalidPartitionError, KafkaTimeoutError, RaylogError,
    UnknownTopicOrPartitionError,
)
from raylog.consumer.fetcher import Fetcher, PartitionState
from raylog.consumer.group_member import ConsumerRebalanceListener, GroupMember
from raylog.naming import validate_topic_name
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.records import (
    ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition,
)

log = logging.getLogger(__name__)

POLL_BATCH_MAX_RECORDS = 500_000
"""poll_batch()'s bound on records per call when not given: its records are column views, so
it hands out many (poll() keeps kafka-python's max_poll_records, 500)."""


def _timeout_s(timeout_ms: float | None, default_s: float) -> float:
    if timeout_ms is None:
        return default_s
    if not isinstance(timeout_ms, (int, float)) or isinstance(timeout_ms, bool) or timeout_ms < 0:
        raise InvalidConfigError(f"timeout_ms must be a number >= 0 or None, got {timeout_ms!r}")
    return timeout_ms / 1000


class Consumer:
    def __init__(self, *topics: str, cluster=None, **configs):
        from raylog.cluster import default_cluster

        self.config: ConsumerConfig = client_config(ConsumerConfig, configs)
        memory.tune()
        self._cluster = cluster or default_cluster()
        self._metadata = self._cluster.metadata
        self._create_topic = self._cluster.auto_creator(self.config.allow_auto_create_topics)
        self._timeout_s = self.config.request_timeout_ms / 1000
        self._metrics = ConsumerMetrics()
        self._fetcher = Fetcher(self.config, self._metadata, self._metrics,
                                self._cluster.config.replica_session_timeout_ms / 1000)
        self._closed = False
        self._group: GroupMember | None = None
        """The group membership, once subscribed."""
        self._offsets: GroupMember | None = None
        """For an assign()ed consumer with a group_id: commits as no member (never joins)."""
        self._manual = False
        self._last_auto_commit = time.monotonic()
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None
        """One thread for every commit, sync or async, so they reach the coordinator in order."""
        self._committing = threading.local()
        self._iterated: deque = deque()
        """Records the iterator fetched and has not yet returned: (record, position after it, the
        partition's fetch state then, its generation)."""
        if topics:
            if self.config.group_id is not None:
                self.subscribe(topics)
            else:
                self.assign([TopicPartition(t, p) for t in topics
                             for p in range(self._topic(t).num_partitions)])

    def _topic(self, topic: str):
        """The topic's metadata, creating it first when auto-creation applies."""
        return self._metadata.topic(validate_topic_name(topic), None, self._create_topic)

    # --- assignment and positions --------------------------------------------------------------

    def _check(self, tp: TopicPartition) -> TopicPartition:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        if tp not in self._fetcher.states:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        return tp

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        self._cluster.session.check()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment with exactly these partitions (they must exist). Not allowed
        while subscribed to a group (IllegalStateError, as kafka-python)."""
        self._check_open()
        if self._group is not None:
            raise IllegalStateError("assign() and subscribe() are mutually exclusive: unsubscribe() first")
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in wanted:
            count = self._topic(tp.topic).num_partitions
            if not isinstance(tp.partition, int) or isinstance(tp.partition, bool) or not 0 <= tp.partition < count:
                raise InvalidPartitionError(f"topic {tp.topic!r} has partitions 0..{count - 1}, not {tp.partition!r}")
        self._manual = bool(wanted)
        for tp in list(self._fetcher.states):
            if tp not in wanted:
                self._fetcher.drop(tp)
        for tp in wanted:
            self._fetcher.states.setdefault(tp, PartitionState())

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join consumer group ``group_id`` for these topics (or every topic matching ``pattern``,
        a Python regular expression matched in full); the group's coordinator assigns partitions,
        and ``listener``'s callbacks run inside poll() when they change. Calling it again changes
        the subscription. IllegalStateError without a group_id or after assign()."""
        self._check_open()
        if self.config.group_id is None:
            raise IllegalStateError("subscribe() needs a group_id (or use assign() for exact partitions)")
        if self._manual:
            raise IllegalStateError("assign() and subscribe() are mutually exclusive: unassign with assign([])")
        if isinstance(topics, str):
            topics = [topics]
        topics = [validate_topic_name(t) for t in topics]
        if self._create_topic is not None:
            for topic in topics:
                self._topic(topic)
        if bool(topics) == (pattern is not None):
            raise InvalidConfigError("subscribe() takes topic names or a pattern, exactly one of them")
        if pattern is not None:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise InvalidConfigError(f"subscription pattern {pattern!r} is not a regular expression: {exc}") from None
        if self._group is None:
            self._group = GroupMember(self._cluster, self.config, listener)
        elif listener is not None:
            self._group.listener = listener
        self._group.subscribe(topics if pattern is None else None, pattern)

    def unsubscribe(self) -> None:
        """Leave the group (its partitions move on at once) and drop every partition."""
        self._check_open()
        if self._group is not None:
            self._commit_on_exit()
            self._group.close(self)
            self._group = None
        self._manual = False
        for tp in list(self._fetcher.states):
            self._fetcher.drop(tp)

    def subscription(self) -> set[str] | None:
        if self._group is None:
            return None
        return set(self._group.topics or ()) if self._group.pattern is None else {self._group.pattern}

    # The group member drives these from poll(): partitions it gives up and partitions it takes.

    def _release(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._fetcher.drop(tp)

    def _acquire(self, partitions: set[TopicPartition], committed: Mapping[TopicPartition, int]) -> None:
        for tp in partitions:
            self._fetcher.states.setdefault(tp, PartitionState())
            if tp in committed:
                self._fetcher.seek(tp, committed[tp])

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        out = {}
        for tp in partitions:
            st = self._fetcher.states.get(tp)
            if st is not None and st.position is not None:
                out[tp] = OffsetAndMetadata(st.position, "")
        return out

    def assignment(self) -> set[TopicPartition]:
        return set(self._fetcher.states)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Next poll() returns records from ``offset`` of ``partition``."""
        if not isinstance(offset, int) or offset < 0:
            raise InvalidOffsetError(f"seek offset must be a non-negative int, got {offset!r}")
        self._fetcher.seek(self._check(partition), offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or self.assignment():
            self._fetcher.reset(self._check(tp), "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or self.assignment():
            self._fetcher.reset(self._check(tp), "latest")

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """Offset of the next record poll() returns for ``partition`` (looked up, within
        ``timeout_ms``, when it has none yet)."""
        st = self._fetcher.states[self._check(partition)]
        if st.position is None:
            self._fetcher.reset(partition, self.config.auto_offset_reset, _timeout_s(timeout_ms, self._timeout_s))
        return st.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark the last fetch of ``partition`` saw (None before any fetch)."""
        hw = self._fetcher.states[self._check(partition)].high_watermark
        return None if hw < 0 else hw

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching and returning records for these partitions until resume()."""
        for tp in partitions:
            self._fetcher.states[self._check(tp)].paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._fetcher.states[self._check(tp)].paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._fetcher.states.items() if st.paused}

    # --- polling ---------------------------------------------------------------------------------

    def poll_batch(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ColumnBatch]:
        """Up to ``max_records`` records as column batches (one or more per partition), waiting
        up to ``timeout_ms`` for the first. The fast path: no Python object per record."""
        self._check_open()
        if not isinstance(timeout_ms, (int, float)) or isinstance(timeout_ms, bool) or timeout_ms < 0:
            raise InvalidConfigError(f"poll timeout_ms must be a number >= 0, got {timeout_ms!r}")
        if max_records is not None and (not isinstance(max_records, int) or max_records < 1):
            raise InvalidConfigError(f"max_records must be an int >= 1, got {max_records!r}")
        self._abandon_iteration()
        return self._poll(timeout_ms, max_records or POLL_BATCH_MAX_RECORDS, advance=True)

    def _poll(self, timeout_ms: float, limit: int, advance: bool) -> list[ColumnBatch]:
        self._maybe_auto_commit()
        if self._group is not None:
            self._group.poll_tick(self)
        fetcher = self._fetcher
        fetcher.resolve_positions()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            fetcher.send_fetches()
            out = fetcher.take(limit, advance)
            if out:
                self._count_consumed(out)
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            fetcher.wait(min(remaining, 0.1) if self._group is not None else remaining)
            if self._group is not None:
                self._group.reconcile(self)
                fetcher.resolve_positions()

    def _count_consumed(self, chunks: list[ColumnBatch]) -> None:
        metrics = self._metrics
        metrics.records.record(sum(map(len, chunks)))
        metrics.bytes.record(sum(chunk.nbytes for chunk in chunks))
        lags = [st.high_watermark - st.position for st in self._fetcher.states.values()
                if st.high_watermark >= 0 and st.position is not None]
        metrics.lag_max = float(max(lags)) if lags else float("nan")

    def poll(self, timeout_ms: int = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """kafka-python's poll: {TopicPartition: [ConsumerRecord, ...]}, at most ``max_records``
        (default max_poll_records) records, built in bulk. ``update_offsets`` is kafka-python's and
        must stay True (positions move past what is returned)."""
        if update_offsets is not True:
            raise InvalidConfigError("poll(update_offsets=False) is not supported: positions move past what poll() returns")
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        kd, vd = self.config.key_deserializer, self.config.value_deserializer
        for chunk in self.poll_batch(timeout_ms, max_records or self.config.max_poll_records):
            records = chunk.records(kd, vd)
            tp = TopicPartition(chunk.topic, chunk.partition)
            if tp in out:
                out[tp].extend(records)
            else:
                out[tp] = records
        return out

    def __iter__(self) -> "Consumer":
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record, fetched and decoded a batch at a time (kafka-python's iterator). The
        position moves past each record as it is returned, as kafka-python's does, so a commit
        after a ``break`` (auto-commit, close()) covers exactly what was returned. StopIteration
        after consumer_timeout_ms without a record (never, by default), or once closed."""
        idle_limit = self.config.consumer_timeout_ms
        last = time.monotonic()
        while not self._closed:
            while self._iterated:
                record, after, st, generation = self._iterated.popleft()
                tp = TopicPartition(record.topic, record.partition)
                if self._fetcher.states.get(tp) is st and st.generation == generation:
                    st.position = after
                    return record
                # A seek or a revocation since it was fetched: it is no longer the next record there.
            chunks = self._poll(self.config.fetch_max_wait_ms, POLL_BATCH_MAX_RECORDS, advance=False)
            if chunks:
                last = time.monotonic()
                self._queue_iterated(chunks)
            elif idle_limit is not None and (time.monotonic() - last) * 1000 >= idle_limit:
                break
        raise StopIteration

    def _queue_iterated(self, chunks: list[ColumnBatch]) -> None:
        kd, vd = self.config.key_deserializer, self.config.value_deserializer
        for chunk in chunks:
            st = self._fetcher.states[TopicPartition(chunk.topic, chunk.partition)]
            records = chunk.records(kd, vd)
            if not records:
                continue
            # Past the last record of a chunk the position is the chunk's end: compaction can leave
            # a gap after it.
            afters = [r.offset + 1 for r in records[:-1]] + [chunk.next_offset]
            self._iterated.extend(zip(records, afters, [st] * len(records), [st.generation] * len(records)))

    def _abandon_iteration(self) -> None:
        """poll() after a ``break`` out of the iterator: records it fetched and did not return are
        fetched again from each partition's position, so poll() returns them."""
        pending = {TopicPartition(r.topic, r.partition): (st, generation) for r, _, st, generation in self._iterated}
        self._iterated.clear()
        for tp, (st, generation) in pending.items():
            if self._fetcher.states.get(tp) is st and st.generation == generation:
                self._fetcher.seek(tp, st.position)

    # --- offsets by time -----------------------------------------------------------------------

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout_ms: int | None = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the earliest offset whose timestamp is >= the given ms; None if none is.
        KafkaTimeoutError past ``timeout_ms`` (default request_timeout_ms)."""
        deadline = time.monotonic() + _timeout_s(timeout_ms, self._timeout_s)
        out = {}
        for tp, ts in timestamps.items():
            if not isinstance(ts, int) or ts < 0:
                raise InvalidOffsetError(f"timestamp for {tp} must be a non-negative int, got {ts!r}")
            offset, found_ts, epoch = self._fetcher.list_offset(TopicPartition(*tp), ts, self._left(deadline))
            out[tp] = None if offset < 0 else OffsetAndTimestamp(offset, found_ts, epoch)
        return out

    def _left(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise KafkaTimeoutError("the call did not finish within its timeout_ms")
        return left

    def _list_offsets(self, partitions: Iterable[TopicPartition], which: int, timeout_ms: int | None) -> dict:
        deadline = time.monotonic() + _timeout_s(timeout_ms, self._timeout_s)
        return {tp: self._fetcher.list_offset(TopicPartition(*tp), which, self._left(deadline))[0] for tp in partitions}

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Each partition's log start offset."""
        return self._list_offsets(partitions, EARLIEST_TIMESTAMP, timeout_ms)

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Each partition's high watermark (the offset the next readable record gets)."""
        return self._list_offsets(partitions, LATEST_TIMESTAMP, timeout_ms)

    # --- cluster metadata (kafka-python's) -------------------------------------------------------

    def topics(self) -> set[str]:
        """Every topic's name (internal ones only with exclude_internal_topics=False)."""
        return set(self._cluster.admin().list_topics(include_internal=not self.config.exclude_internal_topics))

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The topic's partition ids; None when it does not exist (kafka-python's)."""
        try:
            return set(range(self._metadata.topic(validate_topic_name(topic)).num_partitions))
        except UnknownTopicOrPartitionError:
            return None

    def metrics(self, raw: bool = False) -> dict | None:
        """kafka-python's consumer metrics, {group: {name: value}}
        ('consumer-fetch-manager-metrics': records-consumed-rate, fetch-latency-avg,
        records-lag-max, ...; 'consumer-coordinator-metrics': commit-rate, ...); None with
        metrics_enabled=False."""
        if not self.config.metrics_enabled:
            return None
        return self._metrics.report(len(self._fetcher.states))

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group member as of the last poll (Kafka's groupMetadata()): its generation_id is the
        member epoch the records that poll returned were fetched under, steady between polls
        however the heartbeats move the group. IllegalStateError without a group_id."""
        self._check_open()
        if self.config.group_id is None:
            raise IllegalStateError("group_metadata needs a group_id")
        if self._group is None:
            return ConsumerGroupMetadata(self.config.group_id, -1, "", self.config.group_instance_id)
        return ConsumerGroupMetadata(self.config.group_id, self._group.poll_epoch, self._group.member_id,
                                     self.config.group_instance_id)

    # --- committed offsets (the group's coordinator keeps them) ------------------------------------

    def _member(self) -> GroupMember:
        self._check_open()
        if self.config.group_id is None:
            raise IllegalStateError("committing and reading committed offsets need a group_id")
        if self._group is not None:
            return self._group
        if self._offsets is None:
            self._offsets = GroupMember(self._cluster, self.config, None)
        return self._offsets

    def _commit_args(self, offsets) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return self._positions(self.assignment())
        out = {}
        for tp, value in offsets.items():
            tp = TopicPartition(*tp)
            om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value, "")
            if not isinstance(om.offset, int) or om.offset < 0 or not isinstance(om.metadata, str):
                raise InvalidOffsetError(f"commit for {tp} needs an offset >= 0 and a str metadata, got {value!r}")
            out[tp] = om
        return out

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
               timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (default: the position of every partition this consumer owns, i.e. past
        every record poll() returned), after every commit_async() made before it (their callbacks
        included), as Kafka's commitSync: a retriable error (the group's coordinator restarting,
        moving or not answering) is tried again until ``timeout_ms`` (default request_timeout_ms).
        Raises CommitFailedError when the group refuses: this member's epoch is stale or fenced, or a
        partition moved to another member; the last retriable error, or KafkaTimeoutError, once
        ``timeout_ms`` has passed (the commit may still land)."""
        self._commit_ordered(self._commit_args(offsets), None if timeout_ms is None else _timeout_s(timeout_ms, 0))

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: Callable[[dict, BaseException | None], None] | None = None):
        """Commit in the background, after the commits made before it; ``callback(offsets, exception
        or None)`` (default: default_offset_commit_callback) runs on the committer thread. Returns a
        concurrent.futures.Future. It is not tried again (as Kafka's commitAsync): a retriable error
        reaches the callback and the future."""
        return self._submit_commit(self._commit_args(offsets), callback or self.config.default_offset_commit_callback)

    def _submit_commit(self, args: dict, callback=None, retry_s: float = 0.0) -> concurrent.futures.Future:
        member = self._member()
        as_member = member is self._group
        if self._committer is None:
            self._committer = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="raylog-commit", initializer=self._mark_committer_thread)

        def run():
            error = None
            started = time.monotonic()
            try:
                member.commit(args, as_member=as_member, retry_s=retry_s)
                self._metrics.commits.record((time.monotonic() - started) * 1000)
            except RaylogError as exc:
                error = exc
            if callback is not None:
                try:
                    callback(args, error)
                except Exception:  # noqa: BLE001 - a user's callback must not break the committer
                    log.exception("raylog commit_async callback raised")
            if error is not None:
                raise error

        return self._committer.submit(run)

    def _mark_committer_thread(self) -> None:
        self._committing.inside = True

    def _commit_ordered(self, args: dict, timeout_s: float | None = None) -> None:
        """Commit now, behind every commit queued before (one thread carries them all, so an older
        offset can never land last): the synchronous commits of commit(), revocations and close(),
        each tried again through retriable errors for ``timeout_s`` (default request_timeout_ms)."""
        retry_s = self._timeout_s if timeout_s is None else timeout_s
        if getattr(self._committing, "inside", False):
            member = self._member()  # a commit_async callback committing: it is the queue's head already
            member.commit(args, as_member=member is self._group, retry_s=retry_s)
            return
        try:
            self._submit_commit(args, retry_s=retry_s).result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise KafkaTimeoutError(f"the commit did not finish within {timeout_s * 1000:.0f} ms") from None

    def committed(self, partition: TopicPartition, metadata: bool = False, timeout_ms: int | None = None):
        """The committed offset of ``partition`` for this group (None if none); with
        ``metadata=True`` an OffsetAndMetadata (kafka-python's signature)."""
        tp = TopicPartition(*partition)
        found = self._member().fetch_committed([tp], _timeout_s(timeout_ms, self._timeout_s)).get(tp)
        if found is None:
            return None
        return found if metadata else found.offset

    def _auto_committed(self) -> Iterable[TopicPartition] | None:
        """The partitions auto-commit covers: a member's owned ones, or, assigned with a group_id,
        the assignment (kafka-python commits for assign() too); None when it does not apply."""
        if not self.config.enable_auto_commit or self.config.group_id is None:
            return None
        if self._group is not None:
            return self._group.owned
        return self.assignment() if self._manual else None

    def _maybe_auto_commit(self) -> None:
        partitions = self._auto_committed()
        if partitions is None:
            return
        now = time.monotonic()
        if (now - self._last_auto_commit) * 1000 >= self.config.auto_commit_interval_ms:
            self._last_auto_commit = now
            positions = self._positions(partitions)
            if positions:
                self.commit_async(positions)

    def _commit_on_exit(self) -> None:
        partitions = self._auto_committed()
        if partitions is not None:
            try:
                positions = self._positions(partitions)
                if positions:
                    self._commit_ordered(positions)
            except RaylogError as exc:
                log.warning("committing on close failed: %s", exc)

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit (with enable_auto_commit), leave the group at once, stop fetching.
        ``timeout_ms`` is kafka-python's; each step is bounded by request_timeout_ms."""
        if self._closed:
            return
        try:
            if autocommit and self._cluster.session.alive():
                self._commit_on_exit()
            if self._committer is not None:
                # Pending commit_async() calls land while this member still owns its partitions,
                # as Kafka's close() waits for them.
                try:
                    self._committer.submit(lambda: None).result(self.config.request_timeout_ms / 1000)
                except concurrent.futures.TimeoutError:
                    log.warning("commits still pending after request_timeout_ms; closing anyway")
            if self._group is not None:
                self._group.close(self)
        finally:
            self._closed = True
            if self._committer is not None:
                self._committer.shutdown(wait=True)
            self._fetcher.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
