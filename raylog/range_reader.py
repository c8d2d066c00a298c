"""Bounded reads: offset ranges planned against the cluster, each read completely from its leader.

``plan_read`` runs where a job is planned (Spark's driver, Ray Data's planner): it resolves a
``ReadSpec`` (raylog.ranges) into partitions and offsets with one round of ``list_offsets``
calls to the partition leaders, then cuts ``OffsetRange``s. ``read_range`` runs in a task
(a Spark task's Python worker, a Ray Data read task): MB-sized ``fetch`` calls from the
range's start, decoded column by column (``column_batch.decode``), clipped to the range's end,
following the leader through elections. Ranges end at most at the high watermark, so a read
returns only records every in-sync replica has.

A range is read *completely* or not at all: if its records cannot all be read before
``timeout_s`` (the leader stays away, or retention removed records meanwhile and
``fail_on_data_loss`` is on), it raises instead of returning part of it, unlike Ray Data's
read_kafka, which returns what it got with a warning.
"""

from __future__ import annotations

import logging
import time
from typing import Iterator

import numpy as np

from raylog import ray_calls
from raylog.consumer import column_batch
from raylog.consumer.column_batch import ColumnBatch
from raylog.consumer.local_leader import LocalLeader
from raylog.errors import KafkaTimeoutError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from raylog.ranges import OffsetRange, ReadSpec, plan
from raylog.records import TopicPartition

log = logging.getLogger(__name__)

FETCH_BYTES = 8 * 1024 * 1024
FETCH_WAIT_MS = 500
RETRY_BACKOFF_S = 0.2
LOCAL_WAIT_S = 0.001
"""Pause of a local read whose range end is above the leader's high watermark (a new leader catching up)."""


def plan_read(cluster, spec: ReadSpec) -> tuple[list[OffsetRange], list[str]]:
    """The ranges ``spec`` reads now, and warnings about records skipped (fail_on_data_loss off).
    Raises UnknownTopicOrPartitionError for a subscribed or assigned topic or partition that
    does not exist (a pattern matching nothing reads nothing)."""
    partitions = resolve_partitions(cluster, spec)
    if not partitions:
        return [], []
    admin = cluster.admin()
    earliest = admin.beginning_offsets(partitions)
    latest = admin.end_offsets(partitions)
    stamps = spec.timestamps_needed(partitions)
    starts = admin.list_offsets({tp: s for tp, (s, _) in stamps.items() if s is not None})
    ends = admin.list_offsets({tp: e for tp, (_, e) in stamps.items() if e is not None})
    by_timestamp = {tp: (getattr(starts.get(tp), "offset", None), getattr(ends.get(tp), "offset", None))
                    for tp in stamps}
    return plan(spec, partitions, earliest, latest, by_timestamp)


def resolve_partitions(cluster, spec: ReadSpec, missing_ok: bool = False) -> list[TopicPartition]:
    """The partitions ``spec`` names now (partition counts read afresh: ones added since count).
    A topic named that does not exist is UnknownTopicOrPartitionError, or, with ``missing_ok`` (a
    running stream, which reports the partitions it loses), left out."""
    existing = cluster.admin().list_topics()
    partitions = []
    for topic in spec.select_topics(existing):
        if topic not in existing:
            if missing_ok:
                continue
            raise UnknownTopicOrPartitionError(f"cannot read topic {topic!r}: it does not exist")
        cluster.metadata.invalidate(topic)
        count = cluster.metadata.partition_count(topic)
        wanted = spec.assign[topic] if spec.assign is not None else range(count)
        missing = [p for p in wanted if not 0 <= p < count]
        if missing:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0..{count - 1}, not {missing}")
        partitions += [TopicPartition(topic, p) for p in wanted]
    return partitions


def read_range(cluster, r: OffsetRange, timeout_s: float = 120.0, fail_on_data_loss: bool = True,
               fetch_bytes: int = FETCH_BYTES, local_reads: bool = True) -> Iterator[ColumnBatch]:
    """Every record of ``r`` (offsets ``from_offset``..``until_offset - 1``, the ones that exist:
    compaction leaves gaps), in offset order."""
    metadata = cluster.metadata
    offset = r.from_offset
    deadline = time.monotonic() + timeout_s
    local = LocalLeader(metadata, r.topic, r.partition) if local_reads else None
    try:
        while offset < r.until_offset:
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"{r.topic}-{r.partition}: read {offset - r.from_offset} of the range "
                                        f"[{r.from_offset}, {r.until_offset}) within {timeout_s}s; not returning "
                                        "part of it")
            if local is not None:
                # On the leader's node the segment files are read directly (the same batches fetch
                # returns); anything the reader declines goes through the leader below.
                got = local.read(offset, fetch_bytes)
                if got is not None:
                    if not got[0]:
                        time.sleep(LOCAL_WAIT_S)  # the high watermark is behind the range end: wait
                        continue
                    offset = yield from _chunks(r, got[0], offset, check_crcs=False)
                    continue
            got = _fetch(metadata, r, offset, fetch_bytes, fail_on_data_loss)
            if isinstance(got, int):
                offset = got
                continue
            if got is None or len(got) == 0:
                continue  # a retry, or the high watermark behind the range end (a new leader catching up)
            offset = yield from _chunks(r, got, offset, check_crcs=True)
    finally:
        if local is not None:
            local.close()


def _fetch(metadata, r: OffsetRange, offset: int, fetch_bytes: int, fail_on_data_loss: bool):
    """The leader's batches from ``offset``; an int to continue from instead (records removed
    while read, skipped with fail_on_data_loss=False); None to try again (a leader change)."""
    try:
        leader = metadata.leader(r.topic, r.partition)
        return ray_calls.get(leader.fetch.remote(offset, fetch_bytes, FETCH_WAIT_MS, 1), FETCH_WAIT_MS / 1000 + 30)[0]
    except OffsetOutOfRangeError as exc:
        if offset < exc.log_start_offset and not fail_on_data_loss:
            log.warning("%s-%d: records %d..%d were removed while being read; skipping to %d "
                        "(fail_on_data_loss=False)", r.topic, r.partition, offset, exc.log_start_offset - 1,
                        exc.log_start_offset)
            return exc.log_start_offset
        raise OffsetOutOfRangeError(
            f"{r.topic}-{r.partition}: offset {offset} of the range [{r.from_offset}, {r.until_offset}) is gone "
            f"(log start {exc.log_start_offset}, end {exc.log_end_offset}); set fail_on_data_loss=False to skip",
            exc.log_start_offset, exc.log_end_offset) from None
    except Exception as exc:  # noqa: BLE001 - a leader change or a restart: retry until the deadline
        err = ray_calls.translate(exc)
        if not getattr(err, "retriable", False):
            raise err from None
        metadata.invalidate(r.topic)
        time.sleep(RETRY_BACKOFF_S)
        return None


def _chunks(r: OffsetRange, records, offset: int, check_crcs: bool):
    """Yield the range's records of ``records`` as ColumnBatches; returns the offset after them."""
    chunks, next_offset = column_batch.decode(r.topic, r.partition, records, offset, check_crcs)
    for chunk in chunks:
        if len(chunk) and chunk.offsets[-1] >= r.until_offset:
            chunk = chunk.slice(0, int(np.searchsorted(chunk.offsets, r.until_offset)))
        if len(chunk):
            yield chunk
    return next_offset
