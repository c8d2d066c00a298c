"""Ray Data over topics: ``read_topic`` (a Datasource) and ``write_topic`` (a Datasink).

``read_topic`` plans offset ranges on the caller with the planner the Spark bridge uses
(raylog.range_reader.plan_read) and gives Ray Data one read task per range; each task
fetches its range from the partition leader's actor and yields Arrow tables with the
schema of ``ray.data.read_kafka`` (raylog.arrow_records.RAY_DATA_SCHEMA). Unlike
read_kafka, a range that cannot be read completely (its leader stays away past
``timeout_ms``, or retention removed records with ``fail_on_data_loss`` on) fails the read
instead of returning part of it.

``write_topic`` sends a Dataset's rows (columns value, and optionally key, headers,
partition, topic, timestamp) with one producer per write task, acks "all" by default.
"""

from __future__ import annotations

import datetime
import logging
import math
from typing import Any, Iterable, Mapping

import ray
from ray.data import Datasink, Datasource, ReadTask
from ray.data.block import BlockMetadata

from raylog.arrow_records import RAY_DATA_SCHEMA, check_sink_schema, coalesce, send_all, to_ray_data_arrow
from raylog.cluster import attached, default_cluster
from raylog.config import ProducerConfig, config_from_mapping
from raylog.errors import InvalidConfigError
from raylog.range_reader import plan_read, read_range
from raylog.ranges import OffsetRange, parse_options, split

log = logging.getLogger(__name__)

BLOCK_ROWS = 100_000
"""Rows per block a read task yields (a fetch decodes into one small table per producer batch)."""

MIN_RECORDS_PER_TASK = 100_000
"""Ranges are split for Ray Data's requested parallelism only down to this size: a read task
costs a connect and a few actor calls before its first record."""


class TopicDatasource(Datasource):
    """Planned offset ranges of topics, read completely by Ray Data's read tasks."""

    def __init__(self, ranges: list[OffsetRange], namespace: str, fail_on_data_loss: bool, timeout_s: float):
        self._ranges = ranges
        self._namespace = namespace
        self._fail_on_data_loss = fail_on_data_loss
        self._timeout_s = timeout_s

    def get_name(self) -> str:
        return "raylog"

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context=None) -> list[ReadTask]:
        total = sum(r.size for r in self._ranges)
        wanted = min(parallelism, max(1, math.ceil(total / MIN_RECORDS_PER_TASK))) if parallelism > 0 else 1
        return [self._task(r, per_task_row_limit) for r in split(self._ranges, wanted)]

    def _task(self, r: OffsetRange, row_limit: int | None) -> ReadTask:
        namespace, fail_on_data_loss, timeout_s = self._namespace, self._fail_on_data_loss, self._timeout_s

        def read() -> Iterable:
            chunks = read_range(attached(namespace), r, timeout_s, fail_on_data_loss)
            yield from coalesce((to_ray_data_arrow(chunk) for chunk in chunks), BLOCK_ROWS)

        # num_rows stays unknown: compaction leaves gaps, so a range's size is only a bound.
        metadata = BlockMetadata(num_rows=None, size_bytes=None, input_files=[f"raylog://{r.topic}/{r.partition}"],
                                 exec_stats=None)
        return ReadTask(read, metadata, schema=RAY_DATA_SCHEMA, per_task_row_limit=row_limit)


def _offsets_option(value: Any, name: str, topics: list[str], cluster) -> dict:
    """read_kafka's start_offset / end_offset as Spark-style read options."""
    if isinstance(value, str):
        return {name: value}
    if isinstance(value, datetime.datetime):
        return {name.replace("offsets", "timestamp"): int(value.timestamp() * 1000)}
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise InvalidConfigError(f"{name} must be an offset >= 0, 'earliest', 'latest', a datetime or "
                                     f"{{topic: {{partition: offset}}}}, got {value!r}")
        return {name: {t: {p: value for p in range(cluster.metadata.partition_count(t))} for t in topics}}
    if isinstance(value, Mapping):
        given = {t: dict(ps) for t, ps in value.items()}
        if name == "starting_offsets":
            # read_kafka starts a partition its dict leaves out at the earliest offset (the Spark
            # option, which raylog.ranges checks, must name every one). Counted afresh: the plan
            # reloads the partitions, and one added since the cache was filled must be named too.
            for t in topics:
                cluster.metadata.invalidate(t)
                given[t] = {p: -2 for p in range(cluster.metadata.partition_count(t))} | given.get(t, {})
        return {name: given}
    raise InvalidConfigError(f"{name} must be an offset, 'earliest', 'latest', a datetime or "
                             f"{{topic: {{partition: offset}}}}, got {value!r}")


def read_topic(topics: str | list[str], *, start_offset: Any = "earliest", end_offset: Any = "latest",
               fail_on_data_loss: bool = True, override_num_blocks: int | None = None,
               timeout_ms: int = 120_000, ray_remote_args: dict | None = None) -> "ray.data.Dataset":
    """The records of ``topics`` from ``start_offset`` to ``end_offset`` as a Dataset with
    read_kafka's columns (offset, key, value, topic, partition, timestamp, timestamp_type,
    headers). Offsets as read_kafka takes them: "earliest" / "latest", an offset for every
    partition, a datetime, or ``{topic: {partition: offset}}``; the end is exclusive and at
    most the high watermark. Offsets are fixed here: the Dataset reads the same records
    however often it runs."""
    names = [topics] if isinstance(topics, str) else list(topics)
    if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms <= 0:
        raise InvalidConfigError(f"timeout_ms must be a positive int, got {timeout_ms!r}")
    cluster = default_cluster()
    options = {"subscribe": names, "fail_on_data_loss": fail_on_data_loss, "min_partitions": override_num_blocks,
               **_offsets_option(start_offset, "starting_offsets", names, cluster),
               **_offsets_option(end_offset, "ending_offsets", names, cluster)}
    spec = parse_options(options)
    ranges, warnings = plan_read(cluster, spec)
    for warning in warnings:
        log.warning(warning)
    source = TopicDatasource(ranges, cluster.config.namespace, spec.fail_on_data_loss, timeout_ms / 1000)
    return ray.data.read_datasource(source, override_num_blocks=override_num_blocks,
                                    ray_remote_args=ray_remote_args or {})


class TopicDatasink(Datasink):
    """Rows into a topic (or the topics of a topic column) through producers in the write tasks."""

    def __init__(self, topic: str | None, namespace: str, producer_configs: dict, timeout_s: float):
        self._topic = topic
        self._namespace = namespace
        self._configs = producer_configs
        self._timeout_s = timeout_s
        self.written = 0

    def get_name(self) -> str:
        return "raylog"

    def write(self, blocks: Iterable, ctx) -> int:
        from ray.data.block import BlockAccessor

        tables = (BlockAccessor.for_block(b).to_arrow() for b in blocks)
        checked = self._checked(tables)
        producer = attached(self._namespace).producer(**self._configs)
        try:
            return send_all(producer, checked, self._topic, self._timeout_s)
        finally:
            producer.close(self._timeout_s)

    def _checked(self, tables):
        for table in tables:
            check_sink_schema(table.schema, self._topic is not None)
            yield table

    def on_write_complete(self, write_result) -> None:
        self.written = sum(write_result.write_returns)


def write_topic(ds: "ray.data.Dataset", topic: str | None = None, *, timeout_ms: int = 300_000,
                **producer_configs: Any) -> int:
    """Send every row of ``ds`` to ``topic`` (or each row's 'topic' column); the columns are those
    of Spark's Kafka sink (value; optionally key, headers, partition, topic) plus timestamp.
    Returns the number of records written, each acknowledged with the producer's acks."""
    config_from_mapping(ProducerConfig, producer_configs)
    cluster = default_cluster()
    if topic is not None:
        cluster.metadata.topic(topic)
    schema = ds.schema()
    if schema is not None:
        import pyarrow as pa

        arrow = schema.base_schema if isinstance(getattr(schema, "base_schema", None), pa.Schema) else None
        if arrow is not None:
            check_sink_schema(arrow, topic is not None)
    sink = TopicDatasink(topic, cluster.config.namespace, producer_configs, timeout_ms / 1000)
    ds.write_datasink(sink)
    return sink.written


__all__ = ["read_topic", "write_topic", "TopicDatasource", "TopicDatasink"]
