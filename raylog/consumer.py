"""Consumer: kafka-python's KafkaConsumer API with manual assignment.

Consumers are cheap: each tracks its own positions and fetches straight from
partition replicas. Consumer groups (subscribe, commit) arrive with the group
coordinator; until then ``Consumer(*topics)`` assigns every partition of the
given topics. Not thread-safe: one thread polls, as in kafka-python.
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from raylog import memory
from raylog.column_batch import ColumnBatch
from raylog.config import ConsumerConfig, config_from_mapping
from raylog.errors import IllegalStateError, InvalidOffsetError
from raylog.fetcher import Fetcher, PartitionState
from raylog.naming import validate_topic_name
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.records import ConsumerRecord, OffsetAndTimestamp, TopicPartition


class Consumer:
    def __init__(self, *topics: str, cluster=None, **configs):
        from raylog.cluster import default_cluster

        self.config: ConsumerConfig = config_from_mapping(ConsumerConfig, configs)
        memory.tune()
        self._cluster = cluster or default_cluster()
        self._metadata = self._cluster.metadata
        self._fetcher = Fetcher(self.config, self._metadata)
        self._closed = False
        if topics:
            self.assign([TopicPartition(t, p) for t in topics
                         for p in range(self._metadata.partition_count(validate_topic_name(t)))])

    # --- assignment and positions --------------------------------------------------------------

    def _check(self, tp: TopicPartition) -> TopicPartition:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        if tp not in self._fetcher.states:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        return tp

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment with exactly these partitions (they must exist)."""
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in wanted:
            self._metadata.leader(validate_topic_name(tp.topic), tp.partition)
        for tp in list(self._fetcher.states):
            if tp not in wanted:
                self._fetcher.drop(tp)
        for tp in wanted:
            self._fetcher.states.setdefault(tp, PartitionState())

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

    def position(self, partition: TopicPartition) -> int:
        """Offset of the next record poll() returns for ``partition``."""
        st = self._fetcher.states[self._check(partition)]
        if st.position is None:
            self._fetcher.reset(partition, self.config.auto_offset_reset)
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
        if self._closed:
            raise IllegalStateError("the consumer is closed")
        limit = max_records or self.config.max_poll_records
        fetcher = self._fetcher
        fetcher.resolve_positions()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            fetcher.send_fetches()
            out = fetcher.take(limit)
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            fetcher.wait(remaining)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """kafka-python's poll: {TopicPartition: [ConsumerRecord, ...]}, records built in bulk."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        kd, vd = self.config.key_deserializer, self.config.value_deserializer
        for chunk in self.poll_batch(timeout_ms, max_records):
            records = chunk.records(kd, vd)
            tp = TopicPartition(chunk.topic, chunk.partition)
            if tp in out:
                out[tp].extend(records)
            else:
                out[tp] = records
        return out

    def __iter__(self):
        """Records one by one, fetched and decoded a batch at a time (kafka-python's iterator).
        Stops after consumer_timeout_ms without a record (never, by default) or on close()."""
        kd, vd = self.config.key_deserializer, self.config.value_deserializer
        idle_limit = self.config.consumer_timeout_ms
        last = time.monotonic()
        while not self._closed:
            chunks = self.poll_batch(timeout_ms=self.config.fetch_max_wait_ms)
            if chunks:
                last = time.monotonic()
            elif idle_limit is not None and (time.monotonic() - last) * 1000 >= idle_limit:
                return
            for chunk in chunks:
                yield from chunk.records(kd, vd)

    # --- offsets by time -----------------------------------------------------------------------

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the earliest offset whose timestamp is >= the given ms; None if none is."""
        out = {}
        for tp, ts in timestamps.items():
            if not isinstance(ts, int) or ts < 0:
                raise InvalidOffsetError(f"timestamp for {tp} must be a non-negative int, got {ts!r}")
            offset, found_ts = self._fetcher.list_offset(TopicPartition(*tp), ts)
            out[tp] = None if offset < 0 else OffsetAndTimestamp(offset, found_ts)
        return out

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._fetcher.list_offset(TopicPartition(*tp), EARLIEST_TIMESTAMP)[0] for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._fetcher.list_offset(TopicPartition(*tp), LATEST_TIMESTAMP)[0] for tp in partitions}

    def close(self) -> None:
        self._closed = True
        self._fetcher.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
