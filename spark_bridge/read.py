"""Batch reads: a topic's records as a DataFrame with the schema of Spark's Kafka source.

pyspark 3.5 has no Python DataSource API, so a read is planned on the driver and executed by
``mapInArrow``: the driver resolves the options into offset ranges (one round of
``list_offsets`` to the partition leaders, raylog.range_reader.plan_read), makes a small
DataFrame with one row per range in its own Spark partition, and maps it through a function
that, in each task's Python worker, fetches its range from the partition leader's actor and
yields Arrow record batches built from the decoded columns. The offsets are fixed when
``read`` is called: every action on the DataFrame reads the same records.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from raylog.arrow_records import spark_schema
from raylog.cluster import default_cluster
from raylog.errors import InvalidConfigError
from raylog.range_reader import plan_read
from raylog.ranges import OffsetRange, parse_options
from spark_bridge import worker
from spark_bridge.launch import ray_address, spark_of

log = logging.getLogger(__name__)

KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
             "timestampType int")
KAFKA_DDL_WITH_HEADERS = KAFKA_DDL + ", headers array<struct<key: string, value: binary>>"
_PLAN_DDL = "topic string, partition int, from_offset long, until_offset long"
RANGE_TIMEOUT_S = 120.0
"""How long a task may take to read its whole range (through leader elections) before failing."""


def read(spark, topics: str | Iterable[str] | None = None, **options: Any):
    """The records of ``topics`` (or of the ``assign`` / ``subscribe`` / ``subscribe_pattern``
    option) as a DataFrame of Spark's Kafka source columns; options as Spark's Kafka source
    (snake_case or camelCase names), see raylog.ranges and docs/architecture.md."""
    if topics is not None:
        if any(k in options for k in ("assign", "subscribe", "subscribe_pattern", "subscribePattern")):
            raise InvalidConfigError("give the topics either as an argument or as assign/subscribe/subscribe_pattern")
        options["subscribe"] = [topics] if isinstance(topics, str) else list(topics)
    spec = parse_options(options)
    if spec.max_offsets_per_trigger is not None:
        raise InvalidConfigError("max_offsets_per_trigger applies to streams (spark_bridge.stream), not batch reads")
    cluster = default_cluster()
    ranges, warnings = plan_read(cluster, spec)
    for warning in warnings:
        log.warning(warning)
    return ranges_frame(spark, cluster, ranges, spec.include_headers, spec.fail_on_data_loss)


def ranges_frame(spark, cluster, ranges: list[OffsetRange], include_headers: bool, fail_on_data_loss: bool):
    """A DataFrame of exactly the records of ``ranges``, one Spark partition per range."""
    spark = spark_of(spark)
    ddl = KAFKA_DDL_WITH_HEADERS if include_headers else KAFKA_DDL
    if not ranges:
        return spark.createDataFrame([], ddl)
    schema = spark_schema(include_headers, spark.conf.get("spark.sql.session.timeZone"))
    address, namespace = ray_address(), cluster.config.namespace
    rows = [(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges]
    plan = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), _PLAN_DDL)

    def read_ranges(batches):
        yield from worker.read_ranges(address, namespace, batches, schema, fail_on_data_loss, RANGE_TIMEOUT_S)

    return plan.mapInArrow(read_ranges, ddl)
