"""PartitionReplica: the Ray actor that owns one partition replica's log on its node.

An async actor, so a long-poll fetch waits on an event without blocking
appends. Every state change (validate, assign offsets, append, advance the
high watermark) runs without an ``await`` in between, so concurrent calls
never see half an append. The actor is placed by placement/ (pinned to its
node, num_cpus=0) and restarted by Ray on that node after a crash; reopening
the PartitionLog recovers whatever the crash left.

Imports stay lean (no pyspark, pandas or raylog clients): every replica is its
own process and each import costs memory per partition.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time

import numpy as np

from actors.replica_state import ProducerStateTable, ReplicaState
from raylog import memory
from raylog.config import TopicConfig
from raylog.errors import OffsetOutOfRangeError, OutOfOrderSequenceError, RaylogError
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ProduceResponse
from raylog.storage.batch import HEADER_SIZE, NO_PRODUCER_ID, RecordBatch
from raylog.storage.log import PartitionLog

MAINTENANCE_INTERVAL_S = 5.0
"""How often retention, time-based flush and compaction are checked (Kafka checks retention every 5 min;
raylog's tests and demos want retention visible sooner, and the check costs microseconds)."""
COMPACTION_INTERVAL_S = 60.0
SEQUENCE_WAIT_S = 10.0
"""How long a batch whose sequence skips ahead waits for the batches before it."""
UNKNOWN_PRODUCER_WAIT_S = 2.0
"""How long a first-seen producer's batch with sequence > 0 waits for sequence 0 before the
replica takes it as the producer's start (its state was lost, e.g. written before the last roll)."""


class PartitionReplica:
    """Owns ``PartitionLog(directory)`` for topic-partition; methods are named after Kafka requests."""

    def __init__(self, topic: str, partition: int, replica_id: int, directory: str, config: dict,
                 leader_epoch: int = 0):
        memory.tune()
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.config = TopicConfig.from_mapping(config)
        self.log = PartitionLog(directory, self.config)
        self.state = ReplicaState(replica_id, leader_epoch, self.log.log_start_offset, self.log.log_end_offset)
        self.producers = self._rebuild_producer_state()
        self._appended: asyncio.Event | None = None
        self._sequence_moved: asyncio.Condition | None = None
        self._maintenance: asyncio.Task | None = None
        self._last_compaction = time.monotonic()
        self._deleted = False

    def _rebuild_producer_state(self) -> ProducerStateTable:
        """Replay producer ids and sequences from the active segment's batch headers, so a
        producer retrying into a restarted replica is still deduplicated (Kafka keeps
        snapshots for this; the active segment covers the last DEDUP_WINDOW batches of any
        producer that wrote since the last roll)."""
        table = ProducerStateTable()
        for batch in self.log.active.batches():
            if batch.producer_id != NO_PRODUCER_ID:
                table.record(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.record_count,
                             ProduceResponse(batch.base_offset, batch.last_offset, -1, self.log.log_start_offset))
        return table

    def _start_background(self) -> None:
        if self._appended is None:
            self._appended = asyncio.Event()
            self._sequence_moved = asyncio.Condition()
            self._maintenance = asyncio.get_running_loop().create_task(self._maintain())

    async def _maintain(self) -> None:
        while not self._deleted:
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            if self._deleted:
                return
            self.maintain()

    def maintain(self) -> dict:
        """Apply retention, time-based flush and (for compacted topics) compaction now."""
        deleted = self.log.delete_old_segments()
        if deleted:
            self.state.on_log_start_moved(self.log.log_start_offset)
        self.log.maybe_flush()
        compacted = 0
        if self.config.cleanup_policy == "compact" and time.monotonic() - self._last_compaction > COMPACTION_INTERVAL_S:
            compacted = self.log.compact()
            self._last_compaction = time.monotonic()
        return {"segments_deleted": deleted, "bytes_compacted": compacted}

    # --- requests -----------------------------------------------------------------------

    async def produce(self, records, acks: int = 1, leader_epoch: int | None = None) -> tuple:
        """Append one producer batch (a bytes-like buffer) and return where it landed, as a
        ProduceResponse tuple (see protocol.py for why a plain tuple).

        Idempotent batches (producer id set) are appended once, in sequence
        order: a retry returns the first append's response (or the error that
        rejected it), and a batch that overtook an earlier one waits for it.
        """
        self._start_background()
        batch = RecordBatch(records, 0)
        pid = batch.producer_id if len(records) >= HEADER_SIZE else NO_PRODUCER_ID
        if pid == NO_PRODUCER_ID:
            return self._append(records)
        epoch, base_seq, count = batch.producer_epoch, batch.base_sequence, batch.record_count
        start = time.monotonic()
        async with self._sequence_moved:
            while True:
                verdict, previous = self.producers.check(pid, epoch, base_seq)
                if verdict != ProducerStateTable.WAIT:
                    break
                known = self.producers.knows(pid, epoch)
                remaining = start + (SEQUENCE_WAIT_S if known else UNKNOWN_PRODUCER_WAIT_S) - time.monotonic()
                if remaining <= 0 and not known:
                    verdict = ProducerStateTable.APPEND  # its earlier batches predate what we remember
                    break
                if remaining <= 0:
                    raise OutOfOrderSequenceError(
                        f"producer {pid} batch with sequence {base_seq} waited {SEQUENCE_WAIT_S}s "
                        "for the batches before it; it was not appended")
                try:
                    await asyncio.wait_for(self._sequence_moved.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
            if verdict == ProducerStateTable.DUPLICATE:
                if isinstance(previous, BaseException):
                    raise previous
                return (previous.base_offset, previous.last_offset, previous.log_append_time_ms,
                        self.log.log_start_offset, True)
            try:
                response = self._append(records)
            except RaylogError as exc:
                if exc.retriable:
                    raise
                # Rejected for good: the sequence is used up, so the batches after it need not wait.
                self.producers.record(pid, epoch, base_seq, count, exc)
                self._sequence_moved.notify_all()
                raise
            self.producers.record(pid, epoch, base_seq, count, ProduceResponse._make(response))
            self._sequence_moved.notify_all()
            return response

    def _append(self, records) -> tuple:
        info = self.log.append(records, self.state.leader_epoch)
        self.state.on_leader_append(self.log.log_end_offset)
        self._appended.set()
        self._appended = asyncio.Event()
        return (info.base_offset, info.last_offset, info.log_append_time_ms, self.log.log_start_offset, False)

    async def fetch(self, offset: int, max_bytes: int, max_wait_ms: int = 0, min_bytes: int = 1) -> tuple:
        """Whole batches from ``offset`` up to the high watermark; waits up to ``max_wait_ms``
        for ``min_bytes``. Raises OffsetOutOfRangeError outside [log_start, log_end]."""
        self._start_background()
        deadline = time.monotonic() + max_wait_ms / 1000.0
        while True:
            event = self._appended
            data = self.log.read(offset, max_bytes, self.state.high_watermark)
            remaining = deadline - time.monotonic()
            if len(data) >= min_bytes or remaining <= 0:
                break
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                pass
        return (np.frombuffer(data, dtype=np.uint8), self.state.high_watermark, self.log.log_start_offset,
                self.log.log_end_offset)

    async def list_offsets(self, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) for EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or a time in ms;
        (-1, -1) when no record is that recent."""
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return self.state.high_watermark, -1
        found = self.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= self.state.high_watermark:
            return -1, -1
        return found

    async def delete_records(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (at most the high watermark)."""
        if offset == LATEST_TIMESTAMP:
            offset = self.state.high_watermark
        if offset > self.state.high_watermark:
            raise OffsetOutOfRangeError(f"cannot delete records before {offset}: it is above the high watermark "
                                        f"{self.state.high_watermark}", self.log.log_start_offset,
                                        self.state.high_watermark)
        self.log.delete_records(offset)
        self.state.on_log_start_moved(self.log.log_start_offset)
        return self.log.log_start_offset

    async def describe(self) -> dict:
        import ray

        return {
            "topic": self.topic,
            "partition": self.partition,
            "directory": self.directory,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "log_start_offset": self.log.log_start_offset,
            "log_end_offset": self.log.log_end_offset,
            "high_watermark": self.state.high_watermark,
            "leader_epoch": self.state.leader_epoch,
            "size_bytes": self.log.size_bytes,
            "segments": len(self.log.segments),
            "recovered_cleanly": self.log.recovered_cleanly,
            "stats": self.log.stats.to_dict(),
        }

    async def maintain_now(self) -> dict:
        self._start_background()
        return self.maintain()

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        """Close the log cleanly (the process may then be killed without a recovery scan)."""
        self._deleted = True
        self.log.close()

    async def delete_data(self) -> None:
        """Topic deletion: close the log and remove the partition directory from this node."""
        self._deleted = True
        self.log.close_unclean()
        shutil.rmtree(self.directory, ignore_errors=True)
